"""`frozen`: the rows of a role that enter no loss, e.g. the Searchers of the "Searchers without a
loss" ablation (`++algorithm.per_role.searcher.estimator=frozen`).

    A_k = 0 on every response token, and every row leaves the loss (batch["trainable"] false)

so the role's tokens carry no gradient: with a policy of its own the role is never updated
(`Policy.update` skips and counts an update with no row left), and in a shared policy only the
other roles' rows train it. Registered in verl's registry like every estimator; needs no reward.
"""

import torch
from verl.trainer.ppo.core_algos import register_adv_est

from verl_masopd.algos.steps import Finished


@register_adv_est("frozen")
def compute_frozen_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config=None, index=None, **unused
) -> tuple[torch.Tensor, torch.Tensor]:
    zeros = torch.zeros_like(response_mask, dtype=torch.float32)
    return zeros, zeros


def finish_frozen(advantages: torch.Tensor, returns: torch.Tensor, inputs: dict) -> Finished:
    """Every row leaves the loss."""
    return Finished(advantages, returns, torch.zeros(len(advantages), dtype=torch.bool))
