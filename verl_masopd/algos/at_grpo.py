"""AT-GRPO (Stronger-MAS): GRPO with std normalisation over (problem, agent, turn) groups.

    Â_i = (r_i − mean_{j∈g(i)} r_j) / (std_{j∈g(i)} r_j + ε),   g(i) = (uid, agent, turn) of row i

Tree sampling (rollout side) copies each agent's best branch to all K branches, so the K rows of
one (problem, agent, turn) group share an identical role history: a valid GRPO group; a group of
one gets Â = 0 (docs/method.md, "Decisions on points the sources leave open"). Reward r is the
combined team + local reward of `rewards.py`. Loss: verl's clipped policy gradient, no KL.

Config keys: algorithm.reward.* (rewards.py); rollout.tree_sampling must be true.
"""

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from verl_masopd.algos.grpo import group_index, without_lone_groups

AT_GRPO_GROUP_FIELDS = ("uid", "agent", "turn")


@register_adv_est("at_grpo")
def compute_at_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    uid: np.ndarray,
    agent: np.ndarray,
    turn: np.ndarray,
    epsilon: float = 1e-6,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO (std-normalised) with the index (uid, agent, turn), 0 for a group of one;
    `index` is ignored."""
    groups = group_index({"uid": uid, "agent": agent, "turn": turn}, AT_GRPO_GROUP_FIELDS)
    advantages, returns = compute_grpo_outcome_advantage(
        token_level_rewards, response_mask, index=groups, epsilon=epsilon, norm_adv_by_std_in_grpo=True
    )
    return without_lone_groups(advantages, returns, groups)
