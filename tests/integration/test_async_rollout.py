"""The rollout beside the update on real tiny engines (CPU): the importance weights of a stale row
reach verl's loss in the engine, and a checkpoint written while rollouts are in flight resumes at
its own data position, dropping them, and trains no sample past the bound."""

import math

import numpy as np
import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.config.actor_loss import actor_loss
from verl_masopd.config.validate import validate_config, verl_algo_config
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.trainer.data import ProblemStream, read_problems
from verl_masopd.trainer.loop import Trainer
from verl_masopd.trainer.staleness import Staleness

pytestmark = pytest.mark.integration


def test_importance_weights_of_stale_rows_reach_the_loss(tiny_model_path, make_policy_batch):
    overrides = ["preset=cpu", f"students.path={tiny_model_path}", "algorithm.adv_estimator=grpo"]
    loss = actor_loss(compose_config(overrides))
    correction = verl_algo_config(compose_config(overrides)).rollout_correction  # the project's defaults
    # an optimizer step too small to move the weights: both passes see the log-probs of `old`
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_model_path, lr=1e-20, seed=0))
    batch = make_policy_batch([6, 4, 5], [4, 3, 4], seed=3)
    old = engine.infer_batch(batch)
    batch.batch["old_log_probs"] = old
    batch.batch["advantages"] = torch.ones_like(old)
    # row 0 is stale (version 0, its policy at 1): log r = 0.4, 1.2, -3.0, 0.1 per token
    log_r = torch.zeros_like(old)
    log_r[0, :4] = torch.tensor([0.4, 1.2, -3.0, 0.1])
    batch.batch["rollout_log_probs"] = old - log_r
    batch.non_tensor_batch["policy"] = np.array(["p"] * 3, dtype=object)
    batch.non_tensor_batch["policy_version"] = np.array([0, 1, 1], dtype=object)

    Staleness(1, correction).apply(batch, {"p": 1})

    # by hand: w = min(r, 2) per token; e^-3 < 0.2 is rejected; the fresh rows' tokens weigh 1
    hand = [math.exp(0.4), 2.0, math.exp(0.1)] + [1.0] * (3 + 4)
    torch.testing.assert_close(batch.batch["rollout_is_weights"][0, [0, 1, 3]], torch.tensor(hand[:3]))
    assert batch.batch["response_mask"][0].tolist() == [1, 1, 0, 1]
    weighted = engine.train_mini_batch(batch, loss)["actor/pg_loss"][0]
    batch.batch.pop("rollout_is_weights")
    plain = engine.train_mini_batch(batch, loss)["actor/pg_loss"][0]
    # ratio 1 inside the clip, advantages 1: the token-mean loss is −mean(w) against −1
    assert weighted / plain == pytest.approx(sum(hand) / len(hand), rel=1e-4)


def test_checkpoint_with_rollouts_in_flight_resumes_at_its_position_within_the_bound(trainer_overrides, builtin_data):
    overrides = trainer_overrides("math", "algorithm.adv_estimator=grpo", "rollout.max_off_policy=1")
    first = Trainer(validate_config(compose_config([*overrides, "trainer.save_freq=1"])))
    first.fit()  # two steps; after each update rollout t + 1 plays
    reference = ProblemStream(read_problems([str(builtin_data["math"])], "math"), 1, first.run.data.seed)
    positions = []
    for _ in range(4):
        reference.next_batch()
        positions.append(reference.state_dict())
    # the checkpoint of step 2 holds the position after the problems of step 2, though the thread drew more
    assert first.data_position == positions[1]
    assert first.stream.state_dict() != positions[1]

    second = Trainer(validate_config(compose_config([*overrides, "trainer.total_training_steps=4"])))
    try:
        second._resume()
        assert second.step == 2 and second.data_position == positions[1]
        metrics = [second.train_step(), second.train_step()]
    finally:
        second.close()
    assert second.data_position == positions[3]
    lags = [m[k] for m in metrics for k in m if k.endswith("/lag_max")]
    assert len(lags) == 2 * len(second.policies) and max(lags) <= 1
    # step 3 trains the rollout played beside step 2's update: one version behind
    assert all(metrics[1][f"offpolicy/{p}/lag_max"] == 1 for p in second.policies)


@pytest.mark.parametrize("temperature", [0.6, 1.4])
def test_stale_rows_of_unchanged_weights_weigh_one_at_any_temperature(trainer_overrides, temperature):
    """The rollout beside the update at a sampling temperature T ≠ 1, with updates too small to move
    the weights: the engine's log-probs are taken at T like the recorded ones, so every stale token's
    importance weight is 1 and none is rejected."""
    overrides = trainer_overrides(
        "math",
        "algorithm.adv_estimator=grpo",
        "rollout.max_off_policy=1",
        f"actor_rollout_ref.rollout.temperature={temperature}",
        "actor_rollout_ref.actor.optim.lr=1e-30",
    )
    metrics = Trainer(validate_config(compose_config(overrides))).fit()

    for policy in ("reasoner", "tool_user"):
        prefix = f"offpolicy/{policy}"
        assert metrics[f"{prefix}/lag_max"] == 1
        assert metrics[f"{prefix}/rejected"] == 0
        assert metrics[f"{prefix}/is_weight_min"] == pytest.approx(1, abs=1e-4)
        assert metrics[f"{prefix}/is_weight_max"] == pytest.approx(1, abs=1e-4)
