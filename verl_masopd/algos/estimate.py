"""The trainer's single entry point: `compute_advantages(data, estimator)` for any registered estimator.

What the estimator reads and which steps it adds are declared in its spec (specs.py); this
module knows no estimator by name. The steps, in order:
    0. from_rollout  spec.from_rollout(groups, workflow) into meta_info, when the trainer hands
                     the step's rollout groups (e.g. CURE's execution matrices)
    1. inputs        spec.fields from the batch (a missing one is named), spec.optional_fields
                     where present, token_level_rewards (rewards.py) unless the spec uses no reward
    2. prepare       spec.prepare(data, estimator): derived inputs
    3. estimate      verl's get_adv_estimator_fn(name)(response_mask, config=<typed options>, **inputs)
    4. finish        spec.finish(advantages, returns, inputs): a `Finished` (steps.py)
Adds batch["advantages"] and batch["returns"], [B, R]; batch["trainable"], [B] bool, the rows
that enter the loss (false: dropped by the estimator; the policy update leaves them out); and
meta_info["advantage_metrics"] (the finishing step's and diagnostics.py's).
"""

from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_masopd.algos.diagnostics import advantage_metrics
from verl_masopd.algos.rewards import combine_rewards, place_on_last_token
from verl_masopd.algos.specs import EstimatorSettings, read_estimator
from verl_masopd.algos.steps import Finished, batch_field


def _reward_inputs(data: DataProto, estimator: EstimatorSettings) -> torch.Tensor:
    name = estimator.name
    scores = combine_rewards(
        batch_field(data, "team_reward", name),
        batch_field(data, "local_reward", name),
        batch_field(data, "local_mask", name),
        estimator.reward,
        use_local=estimator.spec.uses_local_reward,
    )
    return place_on_last_token(scores, data.batch["response_mask"])


def _estimator_inputs(data: DataProto, estimator: EstimatorSettings) -> dict[str, Any]:
    spec = estimator.spec
    inputs = {field: batch_field(data, field, spec.name) for field in spec.fields}
    inputs |= {field: data.batch[field] for field in spec.optional_fields if field in data.batch.keys()}
    inputs["token_level_rewards"] = None if spec.uses_local_reward is None else _reward_inputs(data, estimator)
    if spec.prepare is not None:
        inputs |= spec.prepare(data, estimator)
    return inputs


def compute_advantages(
    data: DataProto,
    estimator: EstimatorSettings | DictConfig,
    groups: Sequence | None = None,
    workflow=None,
) -> DataProto:
    """Add "advantages", "returns" and "trainable" for the estimator; returns `data`.

    `estimator` is the run's settings, or a config whose `algorithm` section is read into them;
    `groups` and `workflow` are the step's rollout groups and the workflow that played them."""
    if not isinstance(estimator, EstimatorSettings):
        estimator = read_estimator(estimator.algorithm)
    spec = estimator.spec
    if spec.from_rollout is not None and groups is not None:
        data.meta_info.update(spec.from_rollout(groups, workflow))
    response_mask = data.batch["response_mask"]
    inputs = _estimator_inputs(data, estimator)
    advantages, returns = get_adv_estimator_fn(spec.name)(
        response_mask=response_mask, config=estimator.options, **inputs
    )
    finished = spec.finish(advantages, returns, inputs) if spec.finish is not None else Finished(advantages, returns)
    trainable = finished.trainable
    if trainable is None:
        trainable = torch.ones(len(response_mask), dtype=torch.bool)
    data.batch["advantages"] = finished.advantages
    data.batch["returns"] = finished.returns
    data.batch["trainable"] = trainable.to(response_mask.device)
    data.meta_info["advantage_metrics"] = finished.metrics | advantage_metrics(data, estimator)
    return data
