"""Scalar RL reward of one row (one agent's response at one turn), combined per method (D.4).

    r = w_team · r_team + w_local · b · r_local

r_team is the episode's team signal, broadcast unchanged to every turn; r_local the role-local
score of that action and b its mask (0 when the evidence was unavailable). MAGRPO keeps its
shared-reward formulation: r = w_team · r_team (the local term is dropped whatever w_local).
MAS-OPD and OPD use no reward; CURE builds its own rewards from the execution matrix.

Config keys (their defaults in config/masopd_trainer.yaml): algorithm.reward.team_weight w_team,
algorithm.reward.local_weight w_local.
"""

from dataclasses import dataclass

import torch

from verl_masopd.options.defaults import packaged_defaults
from verl_masopd.options.errors import require


@dataclass(frozen=True)
@packaged_defaults("algorithm.reward")
class RewardWeights:
    team_weight: float
    local_weight: float

    def __post_init__(self):
        require(self.team_weight >= 0, "algorithm.reward.team_weight", f"must be >= 0, got {self.team_weight}")
        require(self.local_weight >= 0, "algorithm.reward.local_weight", f"must be >= 0, got {self.local_weight}")


def combine_rewards(
    team_reward: torch.Tensor,
    local_reward: torch.Tensor,
    local_mask: torch.Tensor,
    weights: RewardWeights,
    use_local: bool = True,
) -> torch.Tensor:
    """r = w_team · r_team + w_local · b · r_local per row, shape [B]; `use_local=False` gives w_team · r_team."""
    reward = weights.team_weight * team_reward.float()
    if use_local:
        reward = reward + weights.local_weight * local_mask.float() * local_reward.float()
    return reward


def place_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """verl's outcome-reward layout: scores [B] on each row's last response token, zeros elsewhere, [B, R].

    A row with an empty response keeps its score on position 0, so no reward is lost.
    """
    mask = response_mask.bool()
    last = torch.where(
        mask.any(dim=-1), mask.long().cumsum(dim=-1).argmax(dim=-1), torch.zeros_like(scores, dtype=torch.long)
    )
    token_rewards = torch.zeros(mask.shape, dtype=torch.float32, device=scores.device)
    token_rewards[torch.arange(mask.shape[0]), last] = scores.float()
    return token_rewards
