"""The rollout beside the update: the staleness bound over seeded random schedules of many steps,
and the rollout correction of stale rows computed by hand on a small batch."""

import math
import random
import threading
import time

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.config.algorithm import RolloutCorrectionConfig

from verl_masopd.trainer.background_rollout import BackgroundRollout, Rollout
from verl_masopd.trainer.staleness import Staleness, version_lags

POLICIES = ("reasoner", "tool_user")
DEFAULT = RolloutCorrectionConfig(
    rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1", rollout_rs_threshold="0.2_5.0"
)


def _batch(policies, versions, old, rollout, mask) -> DataProto:
    return DataProto.from_dict(
        tensors={
            "old_log_probs": torch.tensor(old, dtype=torch.float32),
            "rollout_log_probs": torch.tensor(rollout, dtype=torch.float32),
            "response_mask": torch.tensor(mask, dtype=torch.int64),
        },
        non_tensors={
            "policy": np.array(policies, dtype=object),
            "policy_version": np.array(versions, dtype=object),
        },
    )


def test_stale_rows_get_truncated_weights_and_rejection_by_hand():
    # log r = old − rollout per token; the reasoner is at version 3, the tool user at 5
    log_r = [[0.5, 1.0, -2.0, 0.0], [0.3, -0.3, 0.0, 0.0], [0.2, 0.2, 0.0, 0.0], [0.6, -0.1, 0.0, 0.0]]
    old = [[-1.0] * 4 for _ in log_r]
    rollout = [[o - d for o, d in zip(row_old, row, strict=True)] for row_old, row in zip(old, log_r, strict=True)]
    mask = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    batch = _batch(["reasoner", "reasoner", "tool_user", "tool_user"], [2, 3, 3, 4], old, rollout, mask)

    metrics = Staleness(1, DEFAULT).apply(batch, {"reasoner": 3, "tool_user": 5})

    # row 0: lag 1, w = min(e^0.5, 2), min(e^1, 2) = 2, and e^-2 < 0.2 is rejected; row 1: lag 0 (weights 1);
    # row 2: lag 2 > 1, dropped; row 3: lag 1, w = e^0.6, e^-0.1
    weights = batch.batch["rollout_is_weights"]
    torch.testing.assert_close(weights[0, :2], torch.tensor([math.exp(0.5), 2.0]))
    torch.testing.assert_close(weights[1], torch.ones(4))
    torch.testing.assert_close(weights[3, :2], torch.tensor([math.exp(0.6), math.exp(-0.1)]))
    assert batch.batch["response_mask"][0].tolist() == [1, 1, 0, 0]
    assert batch.batch["response_mask"][1:].tolist() == mask[1:]
    assert batch.batch["trainable"].tolist() == [True, True, False, True]
    kept = [math.exp(0.5), 2.0, 1.0, 1.0]
    assert metrics["offpolicy/reasoner/is_weight_mean"] == pytest.approx(sum(kept) / 4)
    assert metrics["offpolicy/reasoner/is_weight_max"] == pytest.approx(2.0)
    assert metrics["offpolicy/reasoner/is_weight_min"] == pytest.approx(1.0)
    assert metrics["offpolicy/reasoner/rejected"] == pytest.approx(1 / 5)
    assert metrics["offpolicy/reasoner/lag_mean"] == 0.5 and metrics["offpolicy/reasoner/lag_max"] == 1
    assert metrics["offpolicy/tool_user/lag_max"] == 2 and metrics["offpolicy/tool_user/dropped"] == 1
    assert metrics["offpolicy/tool_user/rejected"] == 0.0
    # the dropped row's tokens are in no statistic: only row 3's weights and the fresh ones
    assert metrics["offpolicy/tool_user/is_weight_mean"] == pytest.approx((math.exp(0.6) + math.exp(-0.1)) / 2)


def test_rows_over_the_bound_are_exactly_the_dropped_ones():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, bound = int(rng.integers(1, 12)), int(rng.integers(1, 4))
        policies = [POLICIES[i] for i in rng.integers(0, 2, n)]
        current = {p: int(rng.integers(4, 9)) for p in POLICIES}
        sampled = [current[p] - int(rng.integers(0, 6)) for p in policies]
        zeros = [[0.0, 0.0]] * n
        batch = _batch(policies, sampled, zeros, zeros, [[1, 1]] * n)
        lags = version_lags(batch, current)
        Staleness(bound, DEFAULT).apply(batch, current)
        assert batch.batch["trainable"].tolist() == (lags <= bound).tolist()


def test_a_row_newer_than_its_policy_is_an_error():
    batch = _batch(["reasoner"], [4], [[0.0]], [[0.0]], [[1]])
    with pytest.raises(RuntimeError, match="newer"):
        version_lags(batch, {"reasoner": 3})


class _Schedule:
    """A random schedule: each policy's version, bumped one policy after the other at random moments
    of the update (as the trainer syncs each policy after its own update), and rollouts whose
    requests read the versions at random moments; the update's speed changes step by step, so the
    rollouts sometimes run ahead (up to the bound) and sometimes lag behind."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.versions = dict.fromkeys(POLICIES, 0)
        self.lock = threading.Lock()

    def pause(self, scale: float = 0.0005) -> None:
        with self.lock:
            seconds = self.rng.random() * scale
        time.sleep(seconds)

    def play(self) -> Rollout:
        """A rollout whose requests read each policy's version at random moments while it plays."""
        samples = []
        for _ in range(6):
            self.pause()
            policy = POLICIES[len(samples) % 2]
            samples.append((policy, self.versions[policy]))
        return Rollout(samples, {}, {})


@pytest.mark.parametrize("bound", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_no_sample_lags_its_policy_by_more_than_the_bound(bound, seed):
    schedule = _Schedule(random.Random(seed * 10 + bound))
    background = BackgroundRollout(schedule.play, bound, first_step=0)
    lags = []
    try:
        for step in range(150):
            rollout = background.take(step)
            assert all(schedule.versions[p] == step for p in POLICIES)
            lags += [schedule.versions[p] - version for p, version in rollout.groups]
            scale = schedule.rng.choice([0.0001, 0.002, 0.01])
            for policy in POLICIES:  # update, then sync this policy while the rollouts play
                schedule.pause(scale)
                schedule.versions[policy] = step + 1
            background.synced(step + 1)
    finally:
        background.close()
    assert min(lags) >= 0 and max(lags) <= bound
    assert max(lags) == bound  # the schedules reach the bound: the rollouts did run ahead


def test_an_error_of_the_rollout_thread_reaches_the_trainer():
    def play() -> Rollout:
        raise ValueError("backend down")

    background = BackgroundRollout(play, 1, first_step=0)
    try:
        with pytest.raises(RuntimeError, match="failed before step 0") as raised:
            background.take(0)
        assert isinstance(raised.value.__cause__, ValueError)
    finally:
        background.close()
