"""The advantage diagnostics on a small hand-made batch: per-role statistics over the response
tokens of the rows that enter the loss, and the critic's explained variance."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import read_estimator
from verl_masopd.algos.diagnostics import advantage_metrics, explained_variance


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
