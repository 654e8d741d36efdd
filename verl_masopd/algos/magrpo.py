"""MAGRPO: Monte-Carlo return-to-go of the team reward, centred over a problem's trajectories
still alive at that turn, shared by every agent of the turn (docs/method.md, "RL baselines").

For episode e of problem group g, lasting T_e turns, with team reward r_e (team only, no local
term), the return-to-go at turn t < T_e is

    last_turn  (default):  R_t(e) = γ^(T_e−1−t) · r_e          r_e is received at the last turn
    every_turn:            R_t(e) = Σ_{t'=t}^{T_e−1} γ^(t'−t) · r_e   r_e broadcast to every turn

and the advantage of every token of every agent's response at turn t is

    A_t(e) = R_t(e) − mean_{e' ∈ g, T_e' > t} R_t(e')        (no std)

The default γ = 1 with last_turn makes R_t(e) = r_e: the paper fixes no discount, and this
reading keeps the team signal "unchanged at every turn"; γ < 1 favours early agreement
(CoMLRL's default is 0.9). every_turn with γ = 1 rewards long episodes, hence not the default.
Loss: unclipped policy gradient −A · Σ_k log π_θ(y_k) — verl's "gpg" loss with
loss_agg_mode "seq-mean-token-sum"; no critic, no KL.

Config keys (their defaults in config/masopd_trainer.yaml): algorithm.magrpo.gamma γ,
algorithm.magrpo.reward_at (last_turn | every_turn), algorithm.reward.team_weight.
"""

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from verl_masopd.algos.options import options_from
from verl_masopd.options.defaults import packaged_defaults
from verl_masopd.options.errors import require
from verl_masopd.rollout.episode_rows import EpisodeRows


@dataclass(frozen=True)
@packaged_defaults("algorithm.magrpo")
class MagrpoOptions:
    gamma: float
    reward_at: str

    def __post_init__(self):
        require(0.0 <= self.gamma <= 1.0, "algorithm.magrpo.gamma", f"must be in [0, 1], got {self.gamma}")
        require(
            self.reward_at in ("last_turn", "every_turn"),
            "algorithm.magrpo.reward_at",
            f"must be 'last_turn' or 'every_turn', got {self.reward_at!r}",
        )


def return_to_go(team_reward: float, turn: int, num_turns: int, options: MagrpoOptions) -> float:
    """R_t(e) for an episode lasting `num_turns` turns."""
    if options.reward_at == "last_turn":
        return options.gamma ** (num_turns - 1 - turn) * team_reward
    return sum(options.gamma ** (later - turn) for later in range(turn, num_turns)) * team_reward


@register_adv_est("magrpo")
def compute_magrpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    episodes: EpisodeRows,
    turn: np.ndarray,
    num_turns: np.ndarray,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row A_t(e) broadcast to the row's response tokens; returns are R_t(e) broadcast likewise.

    `episodes` are the batch's episodes by problem group (rollout/episode_rows.py): e is alive at
    turn t when it has a row of turn t. `token_level_rewards` sum to r_e on every row of episode e;
    `index` is ignored.
    """
    options = options_from(config, "magrpo", MagrpoOptions)
    team = token_level_rewards.sum(dim=-1).tolist()
    returns = [return_to_go(team[i], int(turn[i]), int(num_turns[i]), options) for i in range(len(team))]

    baseline = [0.0] * len(returns)
    for group in episodes.groups:
        alive_returns: dict[int, dict[int, float]] = defaultdict(dict)
        for e, rows in enumerate(group):
            for i in rows:
                alive_returns[int(turn[i])][e] = returns[i]
        for rows in group:
            for i in rows:
                baseline[i] = float(np.mean(list(alive_returns[int(turn[i])].values())))

    mask = response_mask.float()
    row_returns = torch.tensor(returns, dtype=torch.float32, device=mask.device)
    row_baseline = torch.tensor(baseline, device=mask.device)
    advantages = (row_returns - row_baseline).unsqueeze(-1) * mask
    return advantages, row_returns.unsqueeze(-1) * mask
