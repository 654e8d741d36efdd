"""The advantage diagnostics a researcher checks first, logged every step.

Over the response tokens (response_mask = 1) of the rows that enter the loss (trainable):
    <estimator>/advantage_mean       mean_k A_k over every role ("per_role/advantage_mean" when the
                                     roles have estimators of their own, algorithm.per_role)
    advantage/<r>/{mean,std,min,max} of A_k over role r's tokens (std: population, 0 for one token)
With a critic (MARFT), over the batch's actions a, V_a the values the advantages were computed
from and R_a their returns (returns[:, 0], the critic's regression target):
    critic/explained_variance        1 − Var(R − V) / Var(R)   (not logged when Var(R) = 0)
1 means the critic predicts the returns, 0 no better than their mean, < 0 worse.
"""

import numpy as np
import torch
from verl import DataProto


def mean_advantage(advantages: torch.Tensor, response_mask: torch.Tensor, trainable: torch.Tensor) -> float:
    """mean_k A_k over the response tokens of the trainable rows (0 when there are none)."""
    mask = response_mask.bool() & trainable.unsqueeze(-1)
    return float(advantages[mask].mean()) if mask.any() else 0.0


def advantage_metrics(data: DataProto, estimator) -> dict[str, float]:
    """The metrics above for a batch holding "advantages", "returns" and "trainable"."""
    advantages, response_mask, trainable = (data.batch[key] for key in ("advantages", "response_mask", "trainable"))
    mask = response_mask.bool() & trainable.unsqueeze(-1)
    name = "per_role" if estimator.per_role else estimator.name
    metrics = {f"{name}/advantage_mean": mean_advantage(advantages, response_mask, trainable)}
    if "role" in data.non_tensor_batch:
        metrics |= role_advantage_stats(advantages, mask, data.non_tensor_batch["role"])
    if estimator.needs_critic:
        variance = explained_variance(data.batch["returns"][:, 0], data.batch["critic_values"])
        if variance is not None:
            metrics["critic/explained_variance"] = variance
    return metrics


def role_advantage_stats(advantages: torch.Tensor, mask: torch.Tensor, roles: np.ndarray) -> dict[str, float]:
    """advantage/<r>/{mean,std,min,max} over the masked tokens of each role's rows."""
    metrics = {}
    roles = np.asarray(roles).astype(str)
    for role in sorted(set(roles)):
        rows = torch.from_numpy(roles == role).to(mask.device)
        values = advantages[mask & rows.unsqueeze(-1)].float()
        if not len(values):
            continue
        metrics[f"advantage/{role}/mean"] = float(values.mean())
        metrics[f"advantage/{role}/std"] = float(values.std(correction=0))
        metrics[f"advantage/{role}/min"] = float(values.min())
        metrics[f"advantage/{role}/max"] = float(values.max())
    return metrics


def explained_variance(returns: torch.Tensor, values: torch.Tensor) -> float | None:
    """1 − Var(R − V) / Var(R) over actions, or None when the returns do not vary."""
    returns, values = returns.float().cpu(), values.float().cpu()
    spread = returns.var(correction=0)
    if spread == 0:
        return None
    return float(1 - (returns - values).var(correction=0) / spread)
