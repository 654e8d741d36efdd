"""The OPD term's loss modes (verl's `distillation.distillation_loss`) and the term on a reward
estimator's advantage, against numbers computed by hand (verl_masopd/algos/distillation.py)."""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_masopd.algos import compute_advantages
from verl_masopd.algos.distillation import DistillationSettings, distillation_signal
from verl_masopd.config import compose_config
from verl_masopd.config.distillation import read_distillation
from verl_masopd.config.estimator import validate_estimator_config

# two response tokens and one padding position; x = ℓT − ℓS = [0.5, −0.5]
STUDENT = torch.tensor([[-1.0, -2.0, -0.5]])
TEACHER = torch.tensor([[-0.5, -2.5, 7.0]])
CONTRAST = torch.tensor([[[-3.0, -1.0, -9.0]]])  # Δ = ℓT − ℓT(q) = [2.5, −1.5]
MASK = torch.tensor([[1.0, 1.0, 0.0]])
K3 = [-(math.exp(0.5) - 0.5 - 1), -(math.exp(-0.5) + 0.5 - 1)]  # −(e^x − x − 1) = [−0.14872, −0.10653]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("k1", [0.5, -0.5]),
        ("kl", [0.5, -0.5]),
        ("abs", [-0.5, -0.5]),
        ("k2", [-0.125, -0.125]),
        ("mse", [-0.125, -0.125]),
        ("k3", K3),
        ("low_var_kl", K3),
    ],
)
def test_each_estimator_mode_by_hand(mode, expected):
    signal = distillation_signal(TEACHER, STUDENT, MASK, DistillationSettings(loss_mode=mode))
    assert torch.allclose(signal, torch.tensor([expected + [0.0]]), atol=1e-6)


def test_the_clamp_bounds_the_divergence():
    settings = DistillationSettings(loss_mode="k3", loss_max_clamp=0.12)
    signal = distillation_signal(TEACHER, STUDENT, MASK, settings)
    assert torch.allclose(signal, torch.tensor([[-0.12, K3[1], 0.0]]), atol=1e-6)


def teacher_batch(student=STUDENT, teacher=TEACHER, contrast=CONTRAST, mask=MASK) -> DataProto:
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "teacher_log_probs": teacher,
            "teacher_contrast_log_probs": contrast,
            "old_log_probs": student,
        },
        non_tensors={"role": np.array(["coder"], dtype=object), "uid": np.array(["p"], dtype=object)},
    )


def run_config(estimator="masopd", teacher="/models/teacher", **distillation_loss):
    return OmegaConf.create(
        {
            "algorithm": {"adv_estimator": estimator, "masopd": {"ras_coef": 1.0, "ras_clip": 2.0}},
            "distillation": {
                "distillation_loss": {"_target_": "verl.workers.config.DistillationLossConfig", **distillation_loss}
            },
            "workflow": {"name": "mas", "domain": "code", "policy_sharing": "role", "agents_per_role": 1, "horizon": 4},
            "rollout": {"tree_sampling": False, "group_size": 4},
            "teacher": {"model_path": teacher},
            "actor_rollout_ref": {"actor": {}},
        }
    )


def test_masopd_under_k3_keeps_the_ras_term():
    # d = K3; β = 1, c = 2: clip(Δ) = [2, −1.5] → A = [K3₀ + 2, K3₁ − 1.5]
    settings = validate_estimator_config(run_config(loss_mode="k3", use_policy_gradient=True, use_task_rewards=False))
    out = compute_advantages(teacher_batch(), settings)
    expected = torch.tensor([[K3[0] + 2.0, K3[1] - 1.5, 0.0]])
    assert torch.allclose(out.batch["advantages"], expected, atol=1e-6)
    terms = out.meta_info["advantage_metrics"]
    assert terms["masopd/coder/opd_term"] == pytest.approx(sum(K3) / 2, abs=1e-6)
    assert terms["masopd/coder/ras_term"] == pytest.approx(0.25)


def test_k1_is_todays_advantage_bit_for_bit():
    # today: A = (ℓT − ℓS) + β·clip(Δ); the k1 mode must give the same bits, and opd its first term
    for estimator in ("masopd", "opd"):
        default = compute_advantages(teacher_batch(), validate_estimator_config(run_config(estimator)))
        k1 = validate_estimator_config(run_config(estimator, loss_mode="k1", use_task_rewards=False))
        explicit = compute_advantages(teacher_batch(), k1)
        s = (TEACHER - STUDENT) * MASK
        today = s + (TEACHER - CONTRAST.mean(dim=1)).clamp(-2.0, 2.0) * MASK if estimator == "masopd" else s
        assert torch.equal(default.batch["advantages"], today)
        assert torch.equal(explicit.batch["advantages"], today)


def grpo_batch() -> DataProto:
    # one problem, four coder rows, combined rewards 1, 0, 1, 1 (team + local); response length 3
    rows = 4
    student = torch.tensor([[-1.0, -2.0, -0.5]] * rows)
    teacher = student + torch.tensor([[0.5, -0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 2.0, 0.0]])
    return DataProto.from_dict(
        tensors={
            "response_mask": MASK.repeat(rows, 1),
            "team_reward": torch.tensor([1.0, 0.0, 0.5, 1.0]),
            "local_reward": torch.tensor([0.0, 0.0, 0.5, 0.0]),
            "local_mask": torch.ones(rows),
            "teacher_log_probs": teacher,
            "old_log_probs": student,
        },
        non_tensors={
            "uid": np.array(["p"] * rows, dtype=object),
            "role": np.array(["coder"] * rows, dtype=object),
            "agent": np.array(["coder_0"] * rows, dtype=object),
            "turn": np.array([0] * rows, dtype=object),
        },
    )


def grpo_config(**distillation_loss):
    cfg = run_config("grpo", **distillation_loss)
    cfg.algorithm.grpo = {"group_by": "problem"}
    return cfg


def test_grpo_plus_opd_adds_lambda_times_the_signal():
    # GRPO alone: (r − 0.75) / 0.5 = [0.5, −1.5, 0.5, 0.5] on every response token;
    # λ = 0.5 times d = ℓT − ℓS (k1) on top
    plain = compute_advantages(grpo_batch(), validate_estimator_config(grpo_config()))
    settings = validate_estimator_config(grpo_config(use_task_rewards=True, distillation_loss_coef=0.5))
    assert settings.needs_teacher and settings.uses_teacher
    both = compute_advantages(grpo_batch(), settings)
    grpo = torch.tensor([0.5, -1.5, 0.5, 0.5]).unsqueeze(-1) * MASK
    d = torch.tensor([[0.5, -0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 2.0, 0.0]])
    assert torch.allclose(plain.batch["advantages"], grpo, atol=1e-4)
    assert torch.allclose(both.batch["advantages"], grpo + 0.5 * d, atol=1e-4)
    assert torch.equal(both.batch["returns"], plain.batch["returns"])
    # mean of λ·d over the 8 response tokens: 0.5 · 2 / 8
    assert both.meta_info["advantage_metrics"]["grpo/coder/distillation_term"] == pytest.approx(0.125)
    assert not validate_estimator_config(grpo_config()).needs_teacher


def test_the_term_reaches_a_role_estimator_of_per_role():
    cfg = grpo_config(use_task_rewards=True, loss_mode="k2")
    cfg.algorithm.per_role = {"coder": {"estimator": "grpo", "group_by": "problem"}}
    settings = validate_estimator_config(cfg)
    assert settings.role_estimator("coder").settings.adds_distillation
    out = compute_advantages(grpo_batch(), settings)
    grpo = torch.tensor([0.5, -1.5, 0.5, 0.5]).unsqueeze(-1) * MASK
    k2 = -0.5 * torch.tensor([[0.25, 0.25, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 4.0, 0.0]])
    assert torch.allclose(out.batch["advantages"], grpo + k2, atol=1e-4)


@pytest.mark.parametrize(
    "cfg, named",
    [
        (run_config(use_task_rewards=True), "use_task_rewards=true cannot be used with algorithm.adv_estimator=masopd"),
        (
            run_config("opd", use_task_rewards=True),
            "use_task_rewards=true cannot be used with algorithm.adv_estimator=opd",
        ),
        (
            OmegaConf.merge(grpo_config(use_task_rewards=True), {"teacher": {"model_path": None}}),
            "teacher.model_path is required by distillation.distillation_loss.use_task_rewards=true",
        ),
        (run_config(loss_mode="tvd"), "distillation.distillation_loss.loss_mode: 'tvd' is not one of verl's modes"),
        (run_config(loss_mode="forward_kl_topk"), "distillation.distillation_loss.topk: forward_kl_topk reads"),
        (run_config(topk=0), "distillation.distillation_loss.topk: must be an integer > 0, got 0"),
        (run_config(topk=-3), "distillation.distillation_loss.topk: must be an integer > 0, got -3"),
        (run_config(loss_mode="jsd", topk=8, jsd_beta=1.0), "distillation.distillation_loss.jsd_beta: must be"),
        (run_config(distillation_loss_coef=-0.5), "distillation.distillation_loss.distillation_loss_coef: must be"),
        (run_config(loss_mode="k1", use_policy_gradient=False), "distillation.distillation_loss: Directly backpropag"),
        (run_config(loss_max_clamp=0), "distillation.distillation_loss.loss_max_clamp: must be > 0"),
    ],
)
def test_bad_combinations_stop_the_start_with_the_key(cfg, named):
    with pytest.raises(ValueError) as info:
        validate_estimator_config(cfg)
    assert named in str(info.value) and "\n" not in str(info.value)


def test_cure_refuses_the_teacher_term():
    cfg = run_config("cure", use_task_rewards=True)
    cfg.workflow.policy_sharing = "shared"
    cfg.actor_rollout_ref.actor = {"use_kl_loss": True}
    with pytest.raises(ValueError, match="cannot be used with algorithm.adv_estimator=cure: its one shared policy"):
        validate_estimator_config(cfg)


def test_the_project_config_is_todays_term():
    settings = read_distillation(compose_config(["preset=cpu"]))
    assert (settings.loss_mode, settings.use_task_rewards, settings.coef, settings.loss_max_clamp) == (
        "k1",
        False,
        1.0,
        None,
    )
    assert settings.use_policy_gradient and not settings.in_engine
    assert read_distillation(OmegaConf.create({})) == DistillationSettings()


@pytest.mark.parametrize(
    "section, topk, in_engine",
    [
        ({"loss_mode": "forward_kl_topk", "topk": 8, "use_policy_gradient": False}, True, True),
        ({"loss_mode": "forward_kl_topk", "topk": 8, "use_policy_gradient": True}, True, True),
        ({"loss_mode": "jsd", "topk": 16, "jsd_beta": 0.1}, True, True),
        ({"loss_mode": "k3", "use_policy_gradient": False}, False, True),
        ({"loss_mode": "k3", "use_policy_gradient": True}, False, False),
    ],
)
def test_the_engine_modes_are_read_through_verls_config(section, topk, in_engine):
    settings = read_distillation(run_config(**section))
    assert settings.uses_topk == topk and settings.in_engine == in_engine
    assert settings.verl_loss_config().loss_mode == section["loss_mode"]
    assert settings.jsd_beta == section.get("jsd_beta", 0.5)


def test_an_engine_mode_leaves_the_ras_term_in_the_advantage_and_weights_the_tokens():
    # masopd with forward_kl_topk: A = β·clip(Δ) only (β = 1, c = 2: [2, −1.5]); w = 1 on the response
    settings = validate_estimator_config(run_config(loss_mode="forward_kl_topk", topk=4, use_policy_gradient=False))
    batch = teacher_batch()
    batch.non_tensor_batch["teacher_scored"] = np.array([True], dtype=object)
    out = compute_advantages(batch, settings)
    assert torch.allclose(out.batch["advantages"], torch.tensor([[2.0, -1.5, 0.0]]))
    assert torch.equal(out.batch["distillation_weight"], MASK)


def test_grpo_plus_an_engine_mode_weights_scored_rows_by_lambda():
    settings = validate_estimator_config(
        grpo_config(use_task_rewards=True, distillation_loss_coef=0.5, loss_mode="k3", use_policy_gradient=False)
    )
    batch = grpo_batch()
    batch.non_tensor_batch["teacher_scored"] = np.array([True, True, False, True], dtype=object)
    out = compute_advantages(batch, settings)
    grpo = torch.tensor([0.5, -1.5, 0.5, 0.5]).unsqueeze(-1) * MASK
    assert torch.allclose(out.batch["advantages"], grpo, atol=1e-4)
    assert torch.equal(out.batch["distillation_weight"], torch.tensor([[0.5], [0.5], [0.0], [0.5]]) * MASK)
