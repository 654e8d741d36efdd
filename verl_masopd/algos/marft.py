"""MARFT: action-level PPO with a centralised critic and GAE over the flattened (turn, agent)
chain (docs/method.md, "RL baselines").

One action a_{t,i} is one whole response of agent i at turn t. The agents of a turn act on the
same state (docs/method.md, "The multi-agent systems"), so their order in the chain is a
convention: by role name, then index within the role (coder_0, coder_1, tester_0; reasoner_0,
tool_user_0). With
V_{t,i} the critic's value of agent i's observation (`critic_values`, [B]) and r_{t,i} the
combined team + local reward of `rewards.py`, for N agents:

    i < N−1:  δ_{t,i}   = r_{t,i}   + γ · V_{t,i+1} − V_{t,i}
    i = N−1:  δ_{t,N−1} = r_{t,N−1} + γ · m_{t+1} · V_{t+1,0} − V_{t,N−1}
    Â_{t,i} = δ_{t,i} + γλ · Â_next         (Â_next = 0 after the episode's last action)
    return_{t,i} = V_{t,i} + Â_{t,i}

m_{t+1} = 1 when turn t+1 exists (the episode went on), 0 after its last turn (agreement or the
horizon): a single-turn episode bootstraps only from the next agent of the same turn and its
last agent gets δ = r − V. Advantages are then normalised over the batch (mean 0, std 1) when
`normalize_advantages` is set; returns are not. Both are broadcast to every response token.

Policy loss "marft" (action level, token-normalised log-probs, clip ε from the actor's
clip_ratio / clip_ratio_low / clip_ratio_high):

    ℓ̄(a) = (1/|a|) Σ_k log π(y_k),   ρ = exp(ℓ̄_θ(a) − ℓ̄_θold(a))
    L = mean over actions of −min(ρ·Â, clip(ρ, 1−ε, 1+ε)·Â)

Config keys (their defaults in config/masopd_trainer.yaml): algorithm.marft.gamma γ, lam λ,
normalize_advantages, critic_lr, critic_hidden, value_coef, huber_delta, value_clip (the
value-loss clip of marft_critic.py), max_grad_norm;
the actor runs with policy_loss.loss_mode=marft, clip_ratio 0.2, grad_clip 0.5, lr 1e-6, 1 epoch.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.core_algos import agg_loss, register_adv_est, register_policy_loss

from verl_masopd.algos.options import options_from
from verl_masopd.options.defaults import packaged_defaults
from verl_masopd.options.errors import require
from verl_masopd.rollout.episode_rows import EpisodeRows


@dataclass(frozen=True)
@packaged_defaults("algorithm.marft")
class MarftOptions:
    gamma: float
    lam: float
    normalize_advantages: bool
    critic_lr: float
    critic_hidden: int
    value_coef: float
    huber_delta: float
    value_clip: float | None
    max_grad_norm: float

    def __post_init__(self):
        require(0.0 <= self.gamma <= 1.0, "algorithm.marft.gamma", f"must be in [0, 1], got {self.gamma}")
        require(0.0 <= self.lam <= 1.0, "algorithm.marft.lam", f"must be in [0, 1], got {self.lam}")
        require(self.critic_lr > 0, "algorithm.marft.critic_lr", f"must be > 0, got {self.critic_lr}")
        require(self.critic_hidden >= 1, "algorithm.marft.critic_hidden", f"must be >= 1, got {self.critic_hidden}")
        require(self.value_coef > 0, "algorithm.marft.value_coef", f"must be > 0, got {self.value_coef}")
        require(self.huber_delta > 0, "algorithm.marft.huber_delta", f"must be > 0, got {self.huber_delta}")
        require(self.max_grad_norm > 0, "algorithm.marft.max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        require(
            self.value_clip is None or self.value_clip > 0,
            "algorithm.marft.value_clip",
            f"must be > 0 or null, got {self.value_clip}",
        )


def row_mean(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over each row's response tokens, [B, R] → [B] (0 for an empty response)."""
    mask = response_mask.float()
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)


def chain_gae(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """Â over one episode's chain, already in (turn, agent) order; the chain's end has no bootstrap.

    Every element's successor is the next agent of the turn or, for a turn's last agent, the
    first agent of the next turn (m_{t+1} = 1 exactly when that successor exists).
    """
    advantages = [0.0] * len(rewards)
    next_value, next_advantage = 0.0, 0.0
    for i in reversed(range(len(rewards))):
        delta = rewards[i] + gamma * next_value - values[i]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[i] = next_advantage
        next_value = values[i]
    return advantages


@register_adv_est("marft")
def compute_marft_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    critic_values: torch.Tensor,
    episodes: EpisodeRows,
    turn: np.ndarray,
    role: np.ndarray,
    agent_index: np.ndarray,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Â and returns per action, broadcast to its tokens. `episodes` are the batch's episodes
    (rollout/episode_rows.py), each a chain ordered by (turn, role, agent index); the batch must
    hold every agent's rows of each episode (all policies together): the chain runs across policies."""
    options = options_from(config, "marft", MarftOptions)
    rewards = token_level_rewards.sum(dim=-1).tolist()
    values = critic_values.float().tolist()

    row_advantages = torch.zeros(len(rewards))
    for rows in episodes.episodes():
        if not rows:
            continue
        rows = sorted(rows, key=lambda i: (int(turn[i]), str(role[i]), int(agent_index[i])))
        chain = chain_gae([rewards[i] for i in rows], [values[i] for i in rows], options.gamma, options.lam)
        row_advantages[rows] = torch.tensor(chain)

    row_returns = row_advantages + critic_values.float().cpu()
    if options.normalize_advantages and len(rewards) > 1:
        row_advantages = (row_advantages - row_advantages.mean()) / (row_advantages.std() + 1e-8)
    mask = response_mask.float()
    return row_advantages.to(mask.device).unsqueeze(-1) * mask, row_returns.to(mask.device).unsqueeze(-1) * mask


@register_policy_loss("marft")
def compute_marft_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config=None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clipped PPO on the action-level ratio ρ = exp(ℓ̄_θ − ℓ̄_θold); one loss term per action.

    `loss_agg_mode` is ignored: an action counts once whatever its length (seq-mean).
    """
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    action_log_ratio = (row_mean(log_prob, response_mask) - row_mean(old_log_prob, response_mask)).clamp(-20.0, 20.0)
    ratio = torch.exp(action_log_ratio)
    action_advantage = row_mean(advantages, response_mask)
    unclipped = -action_advantage * ratio
    clipped = -action_advantage * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    action_loss = torch.maximum(unclipped, clipped)
    if rollout_is_weights is not None:
        action_loss = action_loss * row_mean(rollout_is_weights, response_mask)

    has_tokens = response_mask.float().sum(dim=-1) > 0
    loss_mat = action_loss.unsqueeze(-1).expand_as(log_prob)
    loss = agg_loss(loss_mat, response_mask, "seq-mean-token-mean", **config.global_batch_info)
    metrics = {
        "actor/pg_clipfrac": verl_F.masked_mean(torch.gt(clipped, unclipped).float(), has_tokens).detach().item(),
        "actor/ppo_kl": verl_F.masked_mean(-action_log_ratio, has_tokens).detach().item(),
    }
    return loss, metrics
