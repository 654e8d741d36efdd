"""Teacher metrics per step and per role (docs/method.md notation, token means over response_mask),
over the rows the teacher scored (a role whose estimator reads no teacher has none).

teacher/{r}/role_advantage    mean_k Δ_k = ℓT_k(r) − mean_{q∈C_r} ℓT_k(q)   (κ ≥ 1 only)
teacher/{r}/reverse_kl        mean_k (ℓS_k − ℓT_k(r)), ℓS = rollout_log_probs
teacher/turn_{t}/reverse_kl   the same over the responses of turn t (every role)
teacher/{r}/privileged_share  share of role r's turns whose teacher context had a PAC block
teacher/tokens_per_response (|x_q| + |y| over the passes), teacher/computed_tokens_per_response
(the tokens the scorer ran through the model: fewer with teacher.share_prefix),
teacher/truncations, teacher/truncated_tokens (the step's `ScoringStats`)
teacher/{name}/weight         several teachers: teacher name's mean α_t over the responses it scored
teacher/reference_share       teacher.privileged=reference: share of scored responses whose teacher
                              contexts held the problem's reference (a row without one has none)
teacher/attribution_model_calls, teacher/attribution_fallbacks, teacher/attribution_overrides
(model verdicts replaced by the verifier fact they contradicted),
teacher/attribution_unavailable (checks that could not run: no privileged block)
"""

from __future__ import annotations

import numpy as np
from verl import DataProto

from verl_masopd.teacher.attribution import Attributions
from verl_masopd.teacher.scoring import ScoringStats


def role_metrics(data: DataProto) -> dict[str, float]:
    """Per-role teacher metrics over the step's scored rows (a role may span several policies)."""
    mask = data.batch["response_mask"].float()
    teacher = data.batch["teacher_log_probs"]
    reverse_kl = ((data.batch["rollout_log_probs"] - teacher) * mask).sum(-1)
    has_contrast = "teacher_contrast_log_probs" in data.batch.keys()
    if has_contrast:
        advantage = ((teacher - data.batch["teacher_contrast_log_probs"].mean(dim=1)) * mask).sum(-1)
    roles = np.asarray(data.non_tensor_batch["role"]).astype(str)
    privileged = np.asarray(data.non_tensor_batch["privileged"]).astype(bool)
    sums: dict[str, dict[str, float]] = {}
    for b, role in enumerate(roles):
        if not data.non_tensor_batch["teacher_scored"][b]:
            continue
        s = sums.setdefault(role, {"tokens": 0.0, "turns": 0.0, "privileged": 0.0, "reverse_kl": 0.0})
        s["tokens"] += float(mask[b].sum())
        s["turns"] += 1.0
        s["privileged"] += float(privileged[b])
        s["reverse_kl"] += float(reverse_kl[b])
        if has_contrast:
            s["role_advantage"] = s.get("role_advantage", 0.0) + float(advantage[b])
    metrics = turn_reverse_kl(data)
    for role, s in sorted(sums.items()):
        tokens = max(s["tokens"], 1.0)
        metrics[f"teacher/{role}/reverse_kl"] = s["reverse_kl"] / tokens
        metrics[f"teacher/{role}/privileged_share"] = s["privileged"] / s["turns"]
        if "role_advantage" in s:
            metrics[f"teacher/{role}/role_advantage"] = s["role_advantage"] / tokens
    return metrics


def turn_reverse_kl(data: DataProto) -> dict[str, float]:
    """teacher/turn_{t}/reverse_kl: mean_k (ℓS_k − ℓT_k(r)) over the response tokens of turn t."""
    kl: dict[int, float] = {}
    tokens: dict[int, float] = {}
    mask = data.batch["response_mask"].float()
    per_row = ((data.batch["rollout_log_probs"] - data.batch["teacher_log_probs"]) * mask).sum(-1)
    for b, turn in enumerate(np.asarray(data.non_tensor_batch["turn"]).astype(int)):
        if not data.non_tensor_batch["teacher_scored"][b]:
            continue
        kl[turn] = kl.get(turn, 0.0) + float(per_row[b])
        tokens[turn] = tokens.get(turn, 0.0) + float(mask[b].sum())
    return {f"teacher/turn_{t}/reverse_kl": kl[t] / max(tokens[t], 1.0) for t in sorted(kl)}


def step_metrics(data: DataProto, stats: ScoringStats, attributions: Attributions | None) -> dict[str, float]:
    """All teacher metrics of a step: the scored batch, the scoring's stats and the attributions."""
    metrics = role_metrics(data)
    responses = max(stats.responses, 1)
    metrics["teacher/tokens_per_response"] = stats.teacher_tokens / responses
    metrics["teacher/computed_tokens_per_response"] = stats.computed_tokens / responses
    metrics["teacher/truncations"] = float(stats.truncations)
    metrics["teacher/truncated_tokens"] = float(stats.truncated_tokens)
    for name, weights in stats.weights.items():  # several teachers: each one's mean α_t
        metrics[f"teacher/{name}/weight"] = sum(weights) / len(weights)
    if stats.references is not None:
        metrics["teacher/reference_share"] = stats.references / responses
    if attributions is not None:
        metrics |= attribution_metrics(attributions)
    return metrics


def attribution_metrics(attributions: Attributions) -> dict[str, float]:
    return {
        "teacher/attribution_model_calls": float(attributions.model_calls),
        "teacher/attribution_fallbacks": float(sum(attributions.fallbacks.values())),
        "teacher/attribution_overrides": float(attributions.overrides),
        "teacher/attribution_unavailable": float(attributions.incomplete),
    }
