"""The advantage diagnostics on small hand-made batches: per-role statistics over the response
tokens of the rows that enter the loss, the critic's explained variance, masopd's and opd's parts
of A_k per role and token class, and the policy's entropy."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator
from verl_masopd.algos.diagnostics import advantage_metrics, entropy_metrics, explained_variance


def batch(trainable):
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1]]),
            "advantages": torch.tensor([[1.0, 3, 9], [-2, 7, 7], [0.5, 0.5, 2]]),
            "returns": torch.tensor([[1.0, 1, 0], [2, 0, 0], [3, 3, 3]]),
            "critic_values": torch.tensor([1.0, 1, 2]),
            "trainable": torch.tensor(trainable),
        },
        non_tensors={"role": np.array(["coder", "coder", "tester"], dtype=object)},
    )


def test_per_role_advantage_statistics_and_explained_variance():
    metrics = advantage_metrics(batch([True, True, True]), read_estimator({"adv_estimator": "marft"}))
    # coder tokens 1, 3, −2 (padding 9 and 7, 7 left out); tester tokens 0.5, 0.5, 2
    assert metrics["marft/advantage_mean"] == pytest.approx(5 / 6)
    assert metrics["advantage/coder/mean"] == pytest.approx(2 / 3)
    assert metrics["advantage/coder/std"] == pytest.approx((38 / 9) ** 0.5)
    assert (metrics["advantage/coder/min"], metrics["advantage/coder/max"]) == (-2.0, 3.0)
    assert metrics["advantage/tester/mean"] == pytest.approx(1.0)
    assert metrics["advantage/tester/std"] == pytest.approx(0.5**0.5)
    assert (metrics["advantage/tester/min"], metrics["advantage/tester/max"]) == (0.5, 2.0)
    # R = 1, 2, 3 and V = 1, 1, 2: 1 − Var(0, 1, 1) / Var(1, 2, 3) = 1 − (2/9) / (2/3)
    assert metrics["critic/explained_variance"] == pytest.approx(2 / 3)


def test_dropped_rows_are_left_out_and_estimators_without_critic_log_no_variance():
    metrics = advantage_metrics(batch([True, False, True]), read_estimator({"adv_estimator": "grpo"}))
    assert metrics["grpo/advantage_mean"] == pytest.approx(7 / 5)
    assert metrics["advantage/coder/mean"] == 2.0 and metrics["advantage/coder/std"] == 1.0
    assert (metrics["advantage/coder/min"], metrics["advantage/coder/max"]) == (1.0, 3.0)
    assert "critic/explained_variance" not in metrics


def test_explained_variance_edges():
    returns = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(returns, returns) == 1.0
    assert explained_variance(returns, torch.full((3,), 2.0)) == 0.0
    assert explained_variance(torch.ones(3), torch.zeros(3)) is None


# masopd's parts of A_k per role and token class; β = 0.5, c = 2, κ = 1. By row (response tokens):
#   reasoner  row 0: s = ℓT(r) − ℓS = [1, −1], Δ = ℓT(r) − ℓT(q) = [3, −1] → ras = 0.5·[2, −1], clipped [1, 0]
#             row 1: s = [0.5], Δ = [0] → ras [0], clipped [0]
#   tool_user row 2: s = [0, 1, −1], Δ = [7, 0, −2] → ras = 0.5·[2, 0, −2], clipped [1, 0, 0] (|−2| = c)
D, F, P, C, PAD = 0, 1, 2, 3, -1


def teacher_batch(trainable=(True, True, True)):
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1]]),
            "teacher_log_probs": torch.tensor([[-1.0, -2, -9], [-0.5, -9, -9], [-1, -1, -3]]),
            "teacher_contrast_log_probs": torch.tensor([[-4.0, -1, 0], [-0.5, 0, 0], [-8, -1, -1]]).unsqueeze(1),
            "old_log_probs": torch.tensor([[-2.0, -1, 0], [-1, 0, 0], [-1, -2, -2]]),
            "token_class": torch.tensor([[D, C, PAD], [C, PAD, PAD], [F, P, P]], dtype=torch.int8),
            "trainable": torch.tensor(trainable),
        },
        non_tensors={
            "role": np.array(["reasoner", "reasoner", "tool_user"], dtype=object),
            "uid": np.array(["p", "p", "p"], dtype=object),
        },
    )


MASOPD = {"adv_estimator": "masopd", "masopd": {"ras_coef": 0.5, "ras_clip": 2.0}}


def test_masopd_terms_per_role_and_token_class_through_compute_advantages():
    metrics = compute_advantages(teacher_batch(), read_estimator(MASOPD)).meta_info["advantage_metrics"]
    expected = {
        "masopd/reasoner/opd_term": 1 / 6,  # (1 − 1 + 0.5) / 3
        "masopd/reasoner/ras_term": 1 / 6,  # (1 − 0.5 + 0) / 3
        "masopd/reasoner/clip_share": 1 / 3,
        "masopd/reasoner/decision/opd_term": 1.0,
        "masopd/reasoner/decision/ras_term": 1.0,
        "masopd/reasoner/decision/clip_share": 1.0,
        "masopd/reasoner/content/opd_term": -0.25,  # (−1 + 0.5) / 2
        "masopd/reasoner/content/ras_term": -0.25,  # (−0.5 + 0) / 2
        "masopd/reasoner/content/clip_share": 0.0,
        "masopd/tool_user/opd_term": 0.0,
        "masopd/tool_user/ras_term": 0.0,  # (1 + 0 − 1) / 3
        "masopd/tool_user/clip_share": 1 / 3,
        "masopd/tool_user/format/opd_term": 0.0,
        "masopd/tool_user/format/ras_term": 1.0,
        "masopd/tool_user/format/clip_share": 1.0,
        "masopd/tool_user/program/opd_term": 0.0,  # (1 − 1) / 2
        "masopd/tool_user/program/ras_term": -0.5,  # (0 − 1) / 2
        "masopd/tool_user/program/clip_share": 0.0,
    }
    terms = {k: v for k, v in metrics.items() if k.count("/") >= 2 and not k.startswith("advantage/")}
    assert terms == pytest.approx(expected)  # classes without tokens log nothing
    # the two terms add up to A_k: reasoner A = [2, −1.5], [0.5]; tool_user A = [1, 1, −2]
    for role in ("reasoner", "tool_user"):
        assert metrics[f"advantage/{role}/mean"] == pytest.approx(
            metrics[f"masopd/{role}/opd_term"] + metrics[f"masopd/{role}/ras_term"]
        )


def test_terms_leave_out_dropped_rows_and_roles_of_other_estimators():
    data = teacher_batch((True, False, True))
    data.batch["advantages"] = torch.zeros(3, 3)
    data.batch["returns"] = torch.zeros(3, 3)
    mixed = read_estimator({**MASOPD, "per_role": {"tool_user": {"estimator": "grpo"}}})
    metrics = advantage_metrics(data, mixed)
    # row 1 dropped: reasoner over row 0 alone; tool_user's grpo declares no terms
    assert metrics["masopd/reasoner/opd_term"] == pytest.approx(0.0)
    assert metrics["masopd/reasoner/ras_term"] == pytest.approx(0.25)
    assert metrics["masopd/reasoner/clip_share"] == pytest.approx(0.5)
    assert metrics["masopd/reasoner/content/opd_term"] == pytest.approx(-1.0)
    assert not any(k.startswith(("masopd/tool_user", "grpo/tool_user")) for k in metrics)


def test_opd_logs_its_one_term_and_no_classes_without_the_column():
    data = teacher_batch()
    del data.batch["token_class"]
    metrics = compute_advantages(data, read_estimator({"adv_estimator": "opd"})).meta_info["advantage_metrics"]
    terms = {k: v for k, v in metrics.items() if k.startswith("opd/") and k != "opd/advantage_mean"}
    assert terms == pytest.approx({"opd/reasoner/opd_term": 1 / 6, "opd/tool_user/opd_term": 0.0})


def test_entropy_per_role_and_token_class_over_every_response_token():
    data = teacher_batch((True, False, True))  # entropy describes the policy: dropped rows count
    entropy = torch.tensor([[0.5, 1.5, 9], [2, 9, 9], [1, 1, 4]])
    assert entropy_metrics(entropy, data) == pytest.approx(
        {
            "actor/reasoner/entropy": 4 / 3,  # (0.5 + 1.5 + 2) / 3
            "actor/reasoner/decision/entropy": 0.5,
            "actor/reasoner/content/entropy": 1.75,
            "actor/tool_user/entropy": 2.0,
            "actor/tool_user/format/entropy": 1.0,
            "actor/tool_user/program/entropy": 2.5,
        }
    )
