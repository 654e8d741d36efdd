"""The trainer's single entry point: `compute_advantages(data, config)` for any estimator.

It gathers what the estimator named by `config.algorithm.adv_estimator` reads from the batch
(interfaces: rollout batch fields, teacher fields, the trainer's old_log_probs) and calls the
function registered in verl's registry under that name, with verl's convention
fn(token_level_rewards, response_mask, config=<algorithm config>, index=..., **extra fields).

Per estimator, beyond response_mask:
    masopd   teacher_log_probs, teacher_contrast_log_probs, old_log_probs | rollout_log_probs
    opd      teacher_log_probs, old_log_probs | rollout_log_probs
    grpo     team_reward, local_reward, local_mask, uid/role/turn (algorithm.grpo.group_by)
    at_grpo  team_reward, local_reward, local_mask, uid, agent, turn
    magrpo   team_reward, uid, episode_id, turn, num_turns
    marft    team_reward, local_reward, local_mask, critic_values [B], episode_id, turn, role, agent_index
             (the batch holds every policy's rows: the GAE chain crosses policies)
    cure     uid, episode_id, role, meta_info["cure_matrices"] {uid: ExecutionMatrix}
Adds batch["advantages"] and batch["returns"], [B, R], and meta_info["advantage_metrics"].
"""

import torch
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_masopd.algos.cure import cure_row_advantages
from verl_masopd.algos.grpo import GROUP_KEYS, GrpoOptions, group_index, without_lone_groups
from verl_masopd.algos.options import read_options
from verl_masopd.algos.rewards import RewardWeights, combine_rewards, place_on_last_token
from verl_masopd.algos.specs import estimator_spec


def _field(data: DataProto, name: str, estimator: str):
    if name in data.batch.keys():
        return data.batch[name]
    if name in data.non_tensor_batch:
        return data.non_tensor_batch[name]
    raise ValueError(f"algorithm.adv_estimator={estimator} needs the batch field {name!r}, which is missing")


def _reward_inputs(data: DataProto, algorithm: DictConfig, estimator: str, use_local: bool) -> torch.Tensor:
    weights = read_options(algorithm, "reward", RewardWeights)
    scores = combine_rewards(
        _field(data, "team_reward", estimator),
        _field(data, "local_reward", estimator),
        _field(data, "local_mask", estimator),
        weights,
        use_local=use_local,
    )
    return place_on_last_token(scores, data.batch["response_mask"])


def _estimator_inputs(data: DataProto, algorithm: DictConfig, name: str) -> dict:
    spec = estimator_spec(name)
    fields = {
        "masopd": ("teacher_log_probs", "teacher_contrast_log_probs"),
        "opd": ("teacher_log_probs",),
        "at_grpo": ("uid", "agent", "turn"),
        "magrpo": ("uid", "episode_id", "turn", "num_turns"),
        "marft": ("critic_values", "episode_id", "turn", "role", "agent_index"),
        "cure": ("uid", "episode_id", "role"),
        "grpo": (),
    }[name]
    inputs = {field: _field(data, field, name) for field in fields}
    inputs["token_level_rewards"] = (
        None if spec.uses_local_reward is None else _reward_inputs(data, algorithm, name, spec.uses_local_reward)
    )
    if spec.needs_teacher:
        for student_field in ("old_log_probs", "rollout_log_probs"):
            if student_field in data.batch.keys():
                inputs[student_field] = data.batch[student_field]
    if name == "cure":
        if "cure_matrices" not in data.meta_info:
            raise ValueError(
                "algorithm.adv_estimator=cure needs meta_info['cure_matrices'] (one ExecutionMatrix per uid)"
            )
        inputs["cure_matrices"] = data.meta_info["cure_matrices"]
    if name == "grpo":
        group_by = read_options(algorithm, "grpo", GrpoOptions).group_by
        inputs["index"] = group_index(data.non_tensor_batch, GROUP_KEYS[group_by])
        inputs["norm_adv_by_std_in_grpo"] = bool(algorithm.get("norm_adv_by_std_in_grpo", True))
    return inputs


def compute_advantages(data: DataProto, config: DictConfig) -> DataProto:
    """Add "advantages" and "returns" ([B, R]) for config.algorithm.adv_estimator; returns `data`."""
    algorithm = config.algorithm
    name = algorithm.adv_estimator
    response_mask = data.batch["response_mask"]
    inputs = _estimator_inputs(data, algorithm, name)
    advantages, returns = get_adv_estimator_fn(name)(response_mask=response_mask, config=algorithm, **inputs)
    metrics = {}
    if name == "grpo":
        advantages, returns = without_lone_groups(advantages, returns, inputs["index"])
    if name == "cure":
        _, kept = cure_row_advantages(
            data.non_tensor_batch["uid"],
            data.non_tensor_batch["episode_id"],
            data.non_tensor_batch["role"],
            data.meta_info["cure_matrices"],
        )
        data.batch["response_mask"] = response_mask * kept.to(response_mask.device).unsqueeze(-1).to(
            response_mask.dtype
        )
        metrics["cure/dropped_rows"] = int((~kept).sum())
    mask = data.batch["response_mask"].bool()
    metrics[f"{name}/advantage_mean"] = float(advantages[mask].mean()) if mask.any() else 0.0
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    data.meta_info["advantage_metrics"] = metrics
    return data
