"""The trainer's single entry point: `compute_advantages(data, estimator)` for any registered estimator.

What the estimator reads and which steps it adds are declared in its spec (specs.py); this
module knows no estimator by name. The steps, in order:
    0. from_rollout  spec.from_rollout(groups, workflow) into meta_info, when the trainer hands
                     the step's rollout groups (e.g. CURE's execution matrices)
    1. inputs        spec.fields from the batch (a missing one is named), spec.optional_fields
                     where present, the batch's episodes (meta_info["episode_rows"]) when the spec
                     reads them, token_level_rewards (rewards.py) unless the spec uses no reward
    2. prepare       spec.prepare(data, estimator): derived inputs
    3. estimate      verl's get_adv_estimator_fn(name)(response_mask, config=<typed options>, **inputs)
    4. finish        spec.finish(advantages, returns, inputs): a `Finished` (steps.py)
    5. distill       with distillation.distillation_loss.use_task_rewards, a reward estimator's
                     advantages get the OPD term: A_k ← A_k + λ · d_k (distillation.py); the
                     returns stay the estimator's
Adds batch["advantages"] and batch["returns"], [B, R]; batch["trainable"], [B] bool, the rows
that enter the loss (false: dropped by the estimator; the policy update leaves them out); and
meta_info["advantage_metrics"] (the finishing step's and diagnostics.py's). With one of the
engine's distillation modes (distillation.py) d_k = 0 in step 5 and in the teacher estimators'
advantages, and batch["distillation_weight"] [B, R] carries each token's weight w_k of the
engine's distillation loss (trainer/distillation_loss.py): the row's estimator's
`distillation_weight` on its generated tokens when the teacher scored the row, else 0.

With `algorithm.per_role` (per_role.py) the steps run once per role on that role's rows, with
the role's estimator and its group key in the "uid" column (its episodes the role's rows of
each), and the results are merged back; without it they run once on the whole batch.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_masopd.algos.diagnostics import advantage_metrics, mean_advantage
from verl_masopd.algos.masopd import task_distillation_term
from verl_masopd.algos.per_role import group_key
from verl_masopd.algos.rewards import combine_rewards, place_on_last_token
from verl_masopd.algos.specs import EstimatorSettings
from verl_masopd.algos.steps import Finished, batch_field
from verl_masopd.rollout.episode_rows import EPISODE_ROWS, episode_rows


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
    if spec.episodes:
        inputs["episodes"] = episode_rows(data, spec.name)
    inputs["token_level_rewards"] = None if spec.uses_local_reward is None else _reward_inputs(data, estimator)
    if spec.prepare is not None:
        inputs |= spec.prepare(data, estimator)
    return inputs


def _estimate(data: DataProto, estimator: EstimatorSettings, groups=None, workflow=None) -> Finished:
    """Steps 0–5 of one estimator on `data`'s rows; `trainable` is every row unless the finishing step drops some."""
    spec = estimator.spec
    if spec.from_rollout is not None and groups is not None:
        data.meta_info.update(spec.from_rollout(groups, workflow))
    response_mask = data.batch["response_mask"]
    inputs = _estimator_inputs(data, estimator)
    advantages, returns = get_adv_estimator_fn(spec.name)(
        response_mask=response_mask, config=estimator.options, **inputs
    )
    finished = spec.finish(advantages, returns, inputs) if spec.finish is not None else Finished(advantages, returns)
    if estimator.adds_distillation:
        finished.advantages = finished.advantages + task_distillation_term(data, estimator)
    trainable = finished.trainable
    if trainable is None:
        trainable = torch.ones(len(response_mask), dtype=torch.bool)
    finished.trainable = trainable.to(response_mask.device)
    return finished


def _estimate_per_role(data: DataProto, estimator: EstimatorSettings) -> Finished:
    """Each role's estimator (`estimator.role_estimator`) on the role's rows alone, their "uid" the
    role's group key (per_role.py); advantages, returns (float32) and trainable merged back in row
    order. Metrics: the role's finishing metrics and its mean advantage under per_role/<role>/."""
    roles = data.non_tensor_batch["role"]
    response_mask = data.batch["response_mask"]
    advantages = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    returns = torch.zeros_like(advantages)
    trainable = torch.zeros(len(response_mask), dtype=torch.bool, device=response_mask.device)
    metrics: dict[str, float] = {}
    for role in sorted(set(roles)):
        entry = estimator.role_estimator(role)
        rows = np.flatnonzero(roles == role)
        part = data.select_idxs(rows)
        part.non_tensor_batch["uid"] = group_key(part.non_tensor_batch, entry.group_by, role)
        if EPISODE_ROWS in data.meta_info:
            part.meta_info = data.meta_info | {EPISODE_ROWS: data.meta_info[EPISODE_ROWS].select(rows)}
        finished = _estimate(part, entry.settings)
        index = torch.from_numpy(rows).to(response_mask.device)
        advantages[index] = finished.advantages
        returns[index] = finished.returns
        trainable[index] = finished.trainable
        mean = mean_advantage(finished.advantages, part.batch["response_mask"], finished.trainable)
        role_metrics = finished.metrics | {f"{entry.settings.name}/advantage_mean": mean}
        metrics |= {f"per_role/{role}/{key}": value for key, value in role_metrics.items()}
    return Finished(advantages, returns, trainable, metrics)


def compute_advantages(
    data: DataProto,
    estimator: EstimatorSettings,
    groups: Sequence | None = None,
    workflow=None,
) -> DataProto:
    """Add "advantages", "returns" and "trainable" for the estimator; returns `data`.

    `estimator` is the run's settings (`RunConfig.estimator`; `read_estimator` of an algorithm
    section); `groups` and `workflow` are the step's rollout groups and the workflow that played them.
    With `algorithm.per_role`, each role's rows get their own estimator (`_estimate_per_role`)."""
    if estimator.per_role:
        finished = _estimate_per_role(data, estimator)
    else:
        finished = _estimate(data, estimator, groups, workflow)
    data.batch["advantages"] = finished.advantages
    data.batch["returns"] = finished.returns
    data.batch["trainable"] = finished.trainable
    if estimator.distillation.in_engine:
        data.batch["distillation_weight"] = _distillation_weight(data, estimator)
    data.meta_info["advantage_metrics"] = finished.metrics | advantage_metrics(data, estimator)
    return data


def _distillation_weight(data: DataProto, estimator: EstimatorSettings) -> torch.Tensor:
    """w_k [B, R]: each row's estimator's weight on its response tokens where the teacher scored it."""
    weights = {
        role: estimator.role_estimator(role).settings.distillation_weight for role in set(data.non_tensor_batch["role"])
    }
    rows = [
        weights[role] * bool(scored)
        for role, scored in zip(data.non_tensor_batch["role"], data.non_tensor_batch["teacher_scored"], strict=True)
    ]
    mask = data.batch["response_mask"]
    return torch.tensor(rows, dtype=torch.float32, device=mask.device)[:, None] * mask.float()
