"""The advantage diagnostics a researcher checks first, logged every step.

Over the response tokens (response_mask = 1) of the rows that enter the loss (trainable):
    <estimator>/advantage_mean       mean_k A_k over every role ("per_role/advantage_mean" when the
                                     roles have estimators of their own, algorithm.per_role)
    advantage/<r>/{mean,std,min,max} of A_k over role r's tokens (std: population, 0 for one token)
    <estimator>/<r>/<term>           mean_k of each per-token part of A_k that role r's estimator
                                     declares (its spec's `token_terms`; masopd: opd_term s_k,
                                     ras_term β·clip(Δ_k, −c, c), clip_share 1[|Δ_k| > c]; opd:
                                     opd_term; a reward estimator with the OPD term:
                                     distillation_term λ·d_k), and <estimator>/<r>/<class>/<term> over the tokens
                                     of each class of token_classes.py (batch["token_class"],
                                     when the trainer set it)
The trainer adds, over the response tokens of every row (`entropy_metrics`):
    actor/<r>/entropy                mean_k H_k, the entropy of the policy that sampled the row
                                     at position k (policy_engine.log_probs_and_entropy), and
                                     actor/<r>/<class>/entropy per token class
With a critic (MARFT), over the batch's actions a, V_a the values the advantages were computed
from and R_a their returns (returns[:, 0], the critic's regression target):
    critic/explained_variance        1 − Var(R − V) / Var(R)   (not logged when Var(R) = 0)
1 means the critic predicts the returns, 0 no better than their mean, < 0 worse.
"""

import numpy as np
import torch
from verl import DataProto

from verl_masopd.algos.masopd import task_distillation_term
from verl_masopd.algos.token_classes import TOKEN_CLASSES


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
        metrics |= token_term_metrics(data, estimator, mask)
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


def token_term_metrics(data: DataProto, estimator, mask: torch.Tensor) -> dict[str, float]:
    """<estimator>/<r>/<term> (and per token class) for the roles whose estimator declares
    `token_terms`, over the `mask`ed tokens of their rows."""
    roles = np.asarray(data.non_tensor_batch["role"]).astype(str)
    classes = data.batch["token_class"] if "token_class" in data.batch.keys() else None
    served: dict[str, tuple] = {}  # estimator name -> (its settings, the roles it serves)
    for role in sorted(set(roles)):
        settings = estimator.role_estimator(role).settings
        if settings.spec.token_terms is not None or settings.adds_distillation:
            served.setdefault(settings.name, (settings, []))[1].append(role)
    metrics = {}
    for name, (settings, its_roles) in served.items():
        rows = torch.from_numpy(np.isin(roles, its_roles)).to(mask.device)
        terms = settings.spec.token_terms(data, settings) if settings.spec.token_terms is not None else {}
        if settings.adds_distillation:
            terms["distillation_term"] = task_distillation_term(data, settings)
        metrics |= role_token_means(name, terms, mask & rows.unsqueeze(-1), roles, classes)
    return metrics


def role_token_means(
    prefix: str, values: dict[str, torch.Tensor], mask: torch.Tensor, roles: np.ndarray, classes: torch.Tensor | None
) -> dict[str, float]:
    """<prefix>/<r>/<name>: mean_k values[name]_k over the `mask`ed tokens of role r's rows, and
    <prefix>/<r>/<class>/<name> over those of each token class (`classes` [B, R], token_classes.py;
    None: no split). A role or class without tokens logs nothing."""
    metrics = {}
    roles = np.asarray(roles).astype(str)
    for role in sorted(set(roles)):
        rows = torch.from_numpy(roles == role).to(mask.device).unsqueeze(-1) & mask
        splits = [(f"{prefix}/{role}/", rows)]
        if classes is not None:
            splits += [(f"{prefix}/{role}/{name}/", rows & (classes == c)) for c, name in enumerate(TOKEN_CLASSES)]
        for key, tokens in splits:
            if tokens.any():
                metrics |= {key + name: float(value[tokens].double().mean()) for name, value in values.items()}
    return metrics


def entropy_metrics(entropy: torch.Tensor, data: DataProto) -> dict[str, float]:
    """actor/<r>/entropy and actor/<r>/<class>/entropy: mean_k H_k over role r's response tokens
    (every row: the entropy describes the policy, not the loss); `entropy` [B, R]."""
    classes = data.batch["token_class"] if "token_class" in data.batch.keys() else None
    mask = data.batch["response_mask"].bool()
    return role_token_means("actor", {"entropy": entropy}, mask, data.non_tensor_batch["role"], classes)


def explained_variance(returns: torch.Tensor, values: torch.Tensor) -> float | None:
    """1 − Var(R − V) / Var(R) over actions, or None when the returns do not vary."""
    returns, values = returns.float().cpu(), values.float().cpu()
    spread = returns.var(correction=0)
    if spread == 0:
        return None
    return float(1 - (returns - values).var(correction=0) / spread)
