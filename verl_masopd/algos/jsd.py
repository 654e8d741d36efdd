"""The generalised Jensen–Shannon divergence over the teacher's top-k tokens, registered in verl's
distillation registry as `jsd` (a top-k mode; distillation.py says where it enters).

At a response position, with K the teacher's k most likely tokens, p_j = π_T(j | x_r, y_<k) and
q_j = π_θ(j | u, y_<k) for j ∈ K (log-probs clamped below at verl's `log_prob_min_clamp`) and
β_J ∈ (0, 1):

    m_j = β_J p_j + (1 − β_J) q_j
    D   = β_J Σ_j p_j (log p_j − log m_j) + (1 − β_J) Σ_j q_j (log q_j − log m_j)

β_J = ½ is the symmetric JSD; β_J → 0 weighs the forward direction KL(p‖q) and β_J → 1 the reverse
one (each scaled by β_J(1 − β_J) in the limit). On the top-k support p and q do not sum to 1, so D
can fall below 0; verl's final step clamps it at 0, as for forward_kl_topk.

`jsd_topk` is what the engine's logits pass computes (trainer/distillation_loss.py calls it where
verl's pass would compute forward_kl_topk); the registered final step is verl's own, which reads
the per-token values the logits pass stored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from verl.trainer.distillation.losses import (
    DistillationLossSettings,
    compute_forward_kl_topk,
    register_distillation_loss,
)
from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size, slice_input_tensor

NAME = "jsd"

register_distillation_loss(DistillationLossSettings(names=[NAME], use_topk=True))(compute_forward_kl_topk)


def generalised_jsd(log_p: torch.Tensor, log_q: torch.Tensor, beta: float) -> torch.Tensor:
    """D of the module doc over the last dimension, from log p and log q (float32)."""
    log_p, log_q = log_p.float(), log_q.float()
    log_m = torch.logaddexp(log_p + torch.log(torch.tensor(beta)), log_q + torch.log(torch.tensor(1 - beta)))
    forward = (log_p.exp() * (log_p - log_m)).sum(-1)
    reverse = (log_q.exp() * (log_q - log_m)).sum(-1)
    return beta * forward + (1 - beta) * reverse


def jsd_topk(
    student_logits: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    beta: float,
    log_prob_min_clamp: float | None,
) -> dict[str, torch.Tensor]:
    """The logits pass of `jsd`, in the layout of verl's fsdp `compute_forward_kl_topk`:
    student_logits (1, T, V) of the packed sequences, the teacher tensors nested (B, seq, k);
    returns distillation_losses, student_mass and teacher_mass, (1, T)."""
    teacher_log_p = teacher_topk_log_probs.values().unsqueeze(0)
    teacher_ids = teacher_topk_ids.values().unsqueeze(0).long()
    if get_ulysses_sequence_parallel_world_size() > 1:
        teacher_log_p = slice_input_tensor(teacher_log_p, dim=1)
        teacher_ids = slice_input_tensor(teacher_ids, dim=1)
    student_log_q = torch.gather(F.log_softmax(student_logits.float(), dim=-1), -1, teacher_ids)
    student_mass, teacher_mass = student_log_q.exp().sum(-1), teacher_log_p.float().exp().sum(-1)
    if log_prob_min_clamp is not None:
        student_log_q = student_log_q.clamp_min(log_prob_min_clamp)
        teacher_log_p = teacher_log_p.clamp_min(log_prob_min_clamp)
    return {
        "distillation_losses": generalised_jsd(teacher_log_p, student_log_q, beta),
        "student_mass": student_mass,
        "teacher_mass": teacher_mass,
    }
