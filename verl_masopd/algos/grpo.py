"""GRPO for SA+ST, SA+MT and MAS+GRPO: verl's own `compute_grpo_outcome_advantage` ("grpo") with
a configurable grouping key (docs/method.md, "Estimators").

    Â_i = (r_i − mean_{j∈g(i)} r_j) / (std_{j∈g(i)} r_j + ε)     (std only if norm_adv_by_std_in_grpo)

with r the combined reward of `rewards.py` and the group g(i) of row i keyed by

    problem            uid
    problem_role       (uid, role)
    problem_role_turn  (uid, role, turn)

MAS+GRPO deliberately ignores that the histories of a group's rollouts diverged after turn 0.
A group of one (a turn reached by one episode of the group) gets Â = 0: verl's convention (mean 0,
std 1) would hand the lone row its raw reward, never negative (docs/method.md,
"Decisions on points the sources leave open").

The estimation's steps (specs.py): `prepare_grpo` builds verl's `index` from the grouping key,
`finish_grpo` zeroes the groups of one.

Config keys: algorithm.grpo.group_by (its default in config/masopd_trainer.yaml), verl's
algorithm.norm_adv_by_std_in_grpo, algorithm.reward.* (rewards.py).
"""

from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto

from verl_masopd.algos.steps import Finished
from verl_masopd.options.defaults import packaged_defaults
from verl_masopd.options.errors import require

GROUP_KEYS = {
    "problem": ("uid",),
    "problem_role": ("uid", "role"),
    "problem_role_turn": ("uid", "role", "turn"),
}


@dataclass(frozen=True)
@packaged_defaults("algorithm.grpo")
class GrpoOptions:
    group_by: str

    def __post_init__(self):
        require(
            self.group_by in GROUP_KEYS,
            "algorithm.grpo.group_by",
            f"must be one of {sorted(GROUP_KEYS)}, got {self.group_by!r}",
        )


def group_index(non_tensor_batch: dict, fields: tuple[str, ...]) -> np.ndarray:
    """One hashable group key per row: the row's values of `fields` joined ("uid|role|turn")."""
    columns = [non_tensor_batch[name] for name in fields]
    return np.array(["|".join(str(value) for value in row) for row in zip(*columns)], dtype=object)


def without_lone_groups(advantages: torch.Tensor, returns: torch.Tensor, index: np.ndarray):
    """`advantages` and `returns` [B, R] with the rows of one-row groups set to 0
    (docs/method.md, "Decisions on points the sources leave open")."""
    _, inverse, counts = np.unique(index.astype(str), return_inverse=True, return_counts=True)
    lone = torch.from_numpy(counts[inverse] == 1).to(advantages.device).unsqueeze(-1)
    return advantages.masked_fill(lone, 0.0), returns.masked_fill(lone, 0.0)


def prepare_grpo(data: DataProto, estimator) -> dict:
    """verl's GRPO inputs beyond the rewards: the group of each row and whether to divide by the std."""
    return {
        "index": group_index(data.non_tensor_batch, GROUP_KEYS[estimator.options.group_by]),
        "norm_adv_by_std_in_grpo": estimator.norm_adv_by_std_in_grpo,
    }


def finish_grpo(advantages: torch.Tensor, returns: torch.Tensor, inputs: dict) -> Finished:
    return Finished(*without_lone_groups(advantages, returns, inputs["index"]))
