"""The OPD term's loss mode and its place in the advantage, from verl's `distillation` config.

For response token y_k of an agent with role r, ℓS_k and ℓT_k(r) as in masopd.py, the
distillation signal is verl's single-sample reverse-KL estimator D (`kl_penalty`, the loss
modes of verl's distillation registry that `use_estimator`), negated and optionally clamped:

    d_k = − clamp(D(ℓS_k, ℓT_k(r)), −M, M)           M = loss_max_clamp (null: no clamp)
    k1, kl          D = ℓS − ℓT                       d_k = ℓT − ℓS = s_k (the default)
    abs             D = |ℓS − ℓT|
    k2, mse         D = ½ (ℓS − ℓT)²
    k3, low_var_kl  D = e^{ℓT−ℓS} − (ℓT − ℓS) − 1     (verl clamps ℓT − ℓS to ±20 and D to ±10)

This is verl's `use_policy_gradient` form, computed by the trainer: d_k is a token advantage of the
clipped policy gradient, as verl's distillation loss uses −D. Where it enters:

    opd                    A_k = d_k
    masopd                 A_k = d_k + β · clip(Δ_k, −c, c)   (RAS's contrast Δ_k compares teacher
                                                              conditions on the sampled token, so it
                                                              is the same for every mode)
    a reward estimator     A_k = A^est_k + λ · d_k            with use_task_rewards, λ =
                                                              distillation_loss_coef (GRPO + OPD)

The engine's modes (`DistillationSettings.in_engine`): the top-k modes and the supervised form
(use_policy_gradient=false) need the student's logits or a gradient through D, so the OPD term
is verl's distillation loss inside the engine's loss (trainer/distillation_loss.py) and the
advantage keeps the rest, d_k = 0 in the table above:

    forward_kl_topk   D_k = Σ_{j ∈ K_k} p_j (log p_j − log q_j)          verl's
    jsd               D_k = β_J Σ_j p_j log(p_j / m_j) + (1 − β_J) Σ_j q_j log(q_j / m_j),
                      m_j = β_J p_j + (1 − β_J) q_j                       (algos/jsd.py)

with K_k the teacher's k most likely tokens at position k under x_r (`topk`), p_j = π_T(j | x_r,
y_<k), q_j = π_θ(j | u, y_<k), β_J = `jsd_beta` (the project's key in this section, 0.5: the
symmetric JSD). The supervised form backpropagates D itself (the estimators but k1, whose
gradient does not depend on the teacher; verl refuses it); the policy-gradient form of a top-k
mode uses −D_k as the advantage of verl's own clipped loss on the sampled token.

Config keys (verl's `DistillationLossConfig`, `distillation.distillation_loss.*`): loss_mode,
use_task_rewards, distillation_loss_coef, loss_max_clamp, log_prob_min_clamp, use_policy_gradient,
topk, and the project's jsd_beta. The project's config sets k1, no task reward and the
policy-gradient form, which are today's masopd and opd; config/distillation.py reads the section
at start. `distillation.enabled` is not read: an estimator uses the teacher by its own need or by
`use_task_rewards`; `distillation.teacher_models` are the teachers (teacher/teachers.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from verl.trainer.distillation.losses import DISTILLATION_SETTINGS_REGISTRY
from verl.trainer.ppo.core_algos import kl_penalty

from verl_masopd.algos import jsd  # noqa: F401  registers "jsd" in verl's registry
from verl_masopd.options.defaults import packaged_default

SECTION = "distillation.distillation_loss"
JSD_BETA = "jsd_beta"


@dataclass(frozen=True)
class DistillationSettings:
    """The run's distillation loss: verl's mode, whether it rides on a reward estimator's
    advantage (`use_task_rewards`) with weight `coef` λ, and the clamp M of D; for the engine's
    modes also `topk`, the policy-gradient or supervised form, verl's log-prob clamp and β_J."""

    loss_mode: str = packaged_default(f"{SECTION}.loss_mode")
    use_task_rewards: bool = packaged_default(f"{SECTION}.use_task_rewards")
    coef: float = packaged_default(f"{SECTION}.distillation_loss_coef")
    loss_max_clamp: float | None = None  # verl's keys the project does not set; None: unused (k1)
    use_policy_gradient: bool = packaged_default(f"{SECTION}.use_policy_gradient")
    topk: int | None = None
    log_prob_min_clamp: float | None = None
    jsd_beta: float = packaged_default(f"{SECTION}.{JSD_BETA}")

    @property
    def uses_topk(self) -> bool:
        """The mode reads the teacher's top-k log-probs (verl's `use_topk`)."""
        return DISTILLATION_SETTINGS_REGISTRY[self.loss_mode].use_topk

    @property
    def in_engine(self) -> bool:
        """The OPD term is verl's distillation loss in the engine (module doc), not a term of A_k."""
        return self.uses_topk or not self.use_policy_gradient

    def verl_loss_config(self):
        """verl's `DistillationLossConfig` of these settings (what its distillation loss reads)."""
        from verl.workers.config import DistillationLossConfig

        return DistillationLossConfig(
            loss_mode=self.loss_mode,
            topk=self.topk,
            use_task_rewards=self.use_task_rewards,
            distillation_loss_coef=self.coef,
            loss_max_clamp=self.loss_max_clamp,
            log_prob_min_clamp=self.log_prob_min_clamp,
            use_policy_gradient=self.use_policy_gradient,
        )


def distillation_signal(
    teacher_log_probs: torch.Tensor,
    student: torch.Tensor,
    response_mask: torch.Tensor,
    settings: DistillationSettings,
) -> torch.Tensor:
    """d_k = −clamp(D(ℓS_k, ℓT_k), −M, M) on response tokens, 0 on padding (module doc)."""
    divergence = kl_penalty(logprob=student, ref_logprob=teacher_log_probs, kl_penalty=settings.loss_mode)
    if settings.loss_max_clamp is not None:
        divergence = divergence.clamp(-settings.loss_max_clamp, settings.loss_max_clamp)
    return -divergence * response_mask
