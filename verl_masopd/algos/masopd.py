"""MAS-OPD (`masopd`) and role-conditioned OPD (`opd`) token advantages (docs/method.md, "MAS-OPD").

For response token y_k of an agent with role r:

    ℓS_k    = log π_θold(y_k | u, y_<k)          old_log_probs, else rollout_log_probs
    ℓT_k(q) = log π_T(y_k | x_q, y_<k)           teacher_log_probs (q = r),
                                                 teacher_contrast_log_probs[:, i] (q ∈ C_r)
    s_k     = ℓT_k(r) − ℓS_k                      role-conditioned OPD signal
    Δ_k     = ℓT_k(r) − mean_{q ∈ C_r} ℓT_k(q)    role advantage (RAS); ℓS_k cancels
    A_k     = s_k + β · clip(Δ_k, −c, c)          masopd
    A_k     = s_k                                 opd

s_k is the default loss mode (k1) of `distillation.distillation_loss`; another mode replaces it
by d_k = −D(ℓS_k, ℓT_k(r)) (distillation.py), handed in as `distillation_signal`, and an engine
mode (top-k, supervised) by 0 here and verl's distillation loss in the engine's loss
(trainer/distillation_loss.py): masopd is then that loss plus the clipped policy gradient on
β · clip(Δ_k, −c, c), RAS's contrast on the sampled token.

Padding positions (response_mask = 0) get A_k = 0. The returns equal the advantages (no critic).
The loss is verl's clipped policy gradient ("vanilla"), token-mean, no KL, no reward term.
PAC acts upstream: it changes the teacher contexts x_q, not this formula.

The diagnostics (diagnostics.py) log the parts of A_k per role and token class, from
`masopd_token_terms` / `opd_token_terms`: opd_term s_k, ras_term β · clip(Δ_k, −c, c) (their sum
is A_k) and clip_share 1[|Δ_k| > c].

Config keys (their defaults in config/masopd_trainer.yaml, verl_masopd/options/defaults.py):
algorithm.masopd.ras_coef β (0 turns RAS off), algorithm.masopd.ras_clip c,
algorithm.masopd.num_contrast_roles κ (the size of C_r).
"""

from dataclasses import dataclass

import torch
from verl.trainer.ppo.core_algos import register_adv_est

from verl_masopd.algos import distillation
from verl_masopd.algos.options import options_from
from verl_masopd.options.defaults import packaged_defaults
from verl_masopd.options.errors import require


@dataclass(frozen=True)
@packaged_defaults("algorithm.masopd")
class MasopdOptions:
    ras_coef: float
    ras_clip: float
    num_contrast_roles: int

    def __post_init__(self):
        require(self.ras_coef >= 0, "algorithm.masopd.ras_coef", f"must be >= 0, got {self.ras_coef}")
        require(self.ras_clip > 0, "algorithm.masopd.ras_clip", f"must be > 0, got {self.ras_clip}")
        require(
            self.num_contrast_roles >= 1,
            "algorithm.masopd.num_contrast_roles",
            f"must be >= 1, got {self.num_contrast_roles}",
        )


def student_log_probs(old_log_probs: torch.Tensor | None, rollout_log_probs: torch.Tensor | None) -> torch.Tensor:
    """ℓS: the engine's recomputed old log-probs when present, else the sampling log-probs."""
    if old_log_probs is not None:
        return old_log_probs
    if rollout_log_probs is None:
        raise ValueError("the batch has neither old_log_probs nor rollout_log_probs: no student log-probs ℓS")
    return rollout_log_probs


def opd_signal(teacher_log_probs: torch.Tensor, student: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """s_k = ℓT_k(r) − ℓS_k on response tokens, 0 on padding."""
    return (teacher_log_probs - student) * response_mask


def role_advantage(teacher_log_probs: torch.Tensor, teacher_contrast_log_probs: torch.Tensor) -> torch.Tensor:
    """Δ_k = ℓT_k(r) − mean_{q∈C_r} ℓT_k(q); contrast scores have shape [B, κ, R]."""
    return teacher_log_probs - teacher_contrast_log_probs.mean(dim=1)


def _student(data) -> torch.Tensor:
    """ℓS of a DataProto's batch, as the estimators read it."""
    present = data.batch.keys()
    return student_log_probs(
        data.batch["old_log_probs"] if "old_log_probs" in present else None,
        data.batch["rollout_log_probs"] if "rollout_log_probs" in present else None,
    )


def prepare_distillation(data, settings) -> dict[str, torch.Tensor]:
    """The estimator input `distillation_signal` d_k [B, R] under the run's loss mode
    (`settings.distillation`, distillation.py); 0 with an engine mode, whose OPD term is in the loss."""
    mask = data.batch["response_mask"].float()
    if settings.distillation.in_engine:
        return {"distillation_signal": torch.zeros_like(mask)}
    return {
        "distillation_signal": distillation.distillation_signal(
            data.batch["teacher_log_probs"], _student(data), mask, settings.distillation
        )
    }


def task_distillation_term(data, settings) -> torch.Tensor:
    """λ · d_k [B, R], the OPD term a reward estimator's advantage gets with use_task_rewards
    (distillation.py; λ = distillation_loss_coef)."""
    return settings.distillation.coef * prepare_distillation(data, settings)["distillation_signal"]


def masopd_token_terms(data, settings) -> dict[str, torch.Tensor]:
    """The parts of A_k at every position of `data` [B, R]: opd_term d_k, ras_term
    β · clip(Δ_k, −c, c) and clip_share 1[|Δ_k| > c] (its mean is the share of clipped tokens)."""
    options = settings.options
    mask = data.batch["response_mask"].float()
    delta = role_advantage(data.batch["teacher_log_probs"], data.batch["teacher_contrast_log_probs"])
    return {
        "opd_term": prepare_distillation(data, settings)["distillation_signal"],
        "ras_term": options.ras_coef * delta.clamp(-options.ras_clip, options.ras_clip) * mask,
        "clip_share": (delta.abs() > options.ras_clip).float() * mask,
    }


def opd_token_terms(data, settings) -> dict[str, torch.Tensor]:
    """opd_term d_k = A_k at every position of `data` [B, R]."""
    return {"opd_term": prepare_distillation(data, settings)["distillation_signal"]}


@register_adv_est("masopd")
def compute_masopd_advantage(
    token_level_rewards: torch.Tensor | None,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    teacher_log_probs: torch.Tensor,
    teacher_contrast_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
    distillation_signal: torch.Tensor | None = None,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_k = s_k + β · clip(Δ_k, −c, c), s_k replaced by `distillation_signal` d_k when given
    (rewards and index are not used: MAS-OPD has no reward term)."""
    options = options_from(config, "masopd", MasopdOptions)
    if teacher_contrast_log_probs.dim() != 3 or teacher_contrast_log_probs.shape[1] != options.num_contrast_roles:
        raise ValueError(
            f"teacher_contrast_log_probs has shape {tuple(teacher_contrast_log_probs.shape)}, expected "
            f"[B, κ={options.num_contrast_roles}, R] (algorithm.masopd.num_contrast_roles)"
        )
    mask = response_mask.float()
    s = distillation_signal
    if s is None:
        s = opd_signal(teacher_log_probs, student_log_probs(old_log_probs, rollout_log_probs), mask)
    delta = role_advantage(teacher_log_probs, teacher_contrast_log_probs)
    advantages = s + options.ras_coef * delta.clamp(-options.ras_clip, options.ras_clip) * mask
    return advantages, advantages


@register_adv_est("opd")
def compute_opd_advantage(
    token_level_rewards: torch.Tensor | None,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    teacher_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
    distillation_signal: torch.Tensor | None = None,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_k = s_k = ℓT_k(r) − ℓS_k, or `distillation_signal` d_k when given."""
    if distillation_signal is not None:
        return distillation_signal, distillation_signal
    advantages = opd_signal(
        teacher_log_probs, student_log_probs(old_log_probs, rollout_log_probs), response_mask.float()
    )
    return advantages, advantages
