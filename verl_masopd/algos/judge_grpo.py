"""`judge_grpo`: GRPO on the judge's score, the Searchers' estimator of the Prompted Critic
comparator (recipes/search/prompted_critic.sh; the score: teacher/judging.py).

    r_i = s_i = σ(ℓT(yes | x_i) − ℓT(no | x_i))
    Â_i = (r_i − mean_{j∈g(i)} r_j) / (std_{j∈g(i)} r_j + ε)     (std only if norm_adv_by_std_in_grpo)

verl's `compute_grpo_outcome_advantage` on r placed on each row's last response token, with the
grouping of grpo.py (`algorithm.grpo.group_by` on the row's "uid", which `algorithm.per_role`
replaces by the role's group key) and Â = 0 for a group of one. The team and local rewards are
not read. Every row must have been judged: a row without a score (its role is not one the
workflow judges) is an error naming the estimator, never a silent 0.
"""

import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from verl_masopd.algos.grpo import prepare_grpo
from verl_masopd.algos.rewards import place_on_last_token

NAME = "judge_grpo"


@register_adv_est(NAME)
def compute_judge_grpo_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config=None, index=None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO on the judge's scores (`token_level_rewards`, from `prepare_judge_grpo`)."""
    return compute_grpo_outcome_advantage(
        token_level_rewards,
        response_mask,
        index=index,
        norm_adv_by_std_in_grpo=kwargs.get("norm_adv_by_std_in_grpo", True),
    )


def prepare_judge_grpo(data: DataProto, estimator) -> dict:
    """GRPO's inputs (grpo.py) with the judge's score as the reward of every row."""
    judged = data.non_tensor_batch.get("judged")
    if judged is None or not all(judged):
        raise ValueError(f"algorithm.adv_estimator={NAME} needs a judge's score on every row, and some rows have none")
    rewards = place_on_last_token(data.batch["judge_score"], data.batch["response_mask"])
    return {"token_level_rewards": rewards, **prepare_grpo(data, estimator)}
