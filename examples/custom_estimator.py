"""A new advantage estimator in one file: registered through verl's registry, described by its
spec, selected with `algorithm.adv_estimator=role_loo`.

A leave-one-out baseline within each role (verl's own "rloo" groups by problem only): over the
rows of one problem, role and turn,

    A_i = scale · (r_i − mean_{j ∈ g(i), j ≠ i} r_j),   g(i) = (uid, role, turn) of row i

with r the combined team + local reward (algos/rewards.py); a group of one gets A = 0.

Two registrations make it a full estimator of this project:
  1. the function, in verl's registry (`register_adv_est`), with verl's signature: the estimation
     hands it `token_level_rewards`, `response_mask`, `config` (the typed options below) and the
     batch fields its spec names;
  2. the spec (`register_estimator`): what it serves and needs (fields, reward, teacher, critic,
     reference, tree sampling, its options section, the actor loss), checked at start-up.

To train with it, import this module before the entry point, e.g. a launcher
`import custom_estimator; from verl_masopd.train import main; main()` run with
`algorithm.adv_estimator=role_loo +algorithm.role_loo.scale=0.5` (`+`: a section the yaml
lacks) and the other usual overrides.

    python examples/custom_estimator.py       # validates a composed config and prints A on a toy batch
"""

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import register_adv_est

from verl_masopd.algos import EstimatorSpec, compute_advantages, register_estimator
from verl_masopd.algos.options import options_from
from verl_masopd.config import compose_config
from verl_masopd.config.estimator import validate_estimator_config
from verl_masopd.options.errors import require


@dataclass(frozen=True)
class RoleLooOptions:
    """algorithm.role_loo.*; a bad value stops the start with a one-line message naming the key."""

    scale: float = 1.0

    def __post_init__(self):
        require(self.scale > 0, "algorithm.role_loo.scale", f"must be > 0, got {self.scale}")


@register_adv_est("role_loo")
def compute_role_loo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    uid: np.ndarray,
    role: np.ndarray,
    turn: np.ndarray,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_i broadcast to row i's response tokens; the returns equal the advantages (no critic)."""
    options = options_from(config, "role_loo", RoleLooOptions)
    rewards = token_level_rewards.sum(dim=-1)
    groups = defaultdict(list)
    for i, key in enumerate(zip(uid, role, turn)):
        groups[key].append(i)
    row_advantages = torch.zeros(len(rewards))
    for rows in groups.values():
        if len(rows) > 1:
            r = rewards[rows]
            others = (r.sum() - r) / (len(rows) - 1)
            row_advantages[rows] = options.scale * (r - others)
    advantages = row_advantages.unsqueeze(-1) * response_mask.float()
    return advantages, advantages


register_estimator(
    EstimatorSpec(
        "role_loo",
        workflows=frozenset({"mas", "sa"}),  # the default serves the multi-agent workflows only
        options=("role_loo", RoleLooOptions),  # read once from algorithm.role_loo into RoleLooOptions
        fields=("uid", "role", "turn"),  # handed to the function by name
        uses_local_reward=True,  # token_level_rewards: team + local reward on the last token
    )
)


def toy_batch() -> DataProto:
    """Two problems' Reasoner rows at turn 0 (3 and 1 rows); one response token each."""
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.ones(4, 1),
            "team_reward": torch.tensor([1.0, 0.0, 0.0, 1.0]),
            "local_reward": torch.tensor([0.5, 0.5, 0.0, 0.0]),
            "local_mask": torch.tensor([1.0, 1.0, 1.0, 0.0]),
        },
        non_tensors={
            "uid": np.array(["p", "p", "p", "q"], dtype=object),
            "role": np.array(["reasoner"] * 4, dtype=object),
            "turn": np.array([0, 0, 0, 0], dtype=object),
        },
    )


def main() -> list[float]:
    """Select the estimator in the project's config, check it, and estimate a toy batch."""
    cfg = compose_config(["preset=cpu", "algorithm.adv_estimator=role_loo", "+algorithm.role_loo.scale=0.5"])
    estimator = validate_estimator_config(cfg)
    advantages = compute_advantages(toy_batch(), estimator).batch["advantages"][:, 0].tolist()
    print(f"{estimator.name} (scale {estimator.options.scale}): advantages {advantages}")
    return advantages


if __name__ == "__main__":
    main()
