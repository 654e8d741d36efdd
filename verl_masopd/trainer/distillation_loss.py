"""The actor loss with verl's distillation loss inside the engine, for the engine's modes of
`distillation.distillation_loss` (algos/distillation.py: a top-k mode or the supervised form).

    L = L_PPO(A) + Σ_k w_k · D_k-term / N          verl's `ppo_loss` + verl's `distillation_loss`

A is the estimator's advantage without the OPD term (masopd: β · clip(Δ_k, −c, c); opd: 0; a
reward estimator with use_task_rewards: its own). The distillation term is verl's, on the tokens
the teacher scored, each weighted by w_k (`distillation_weight`, [B, R]: 1 on a teacher
estimator's rows, λ = distillation_loss_coef on a reward estimator's with use_task_rewards, 0 on
rows the teacher did not score and on observation tokens), aggregated like the PPO term (verl's
`loss_agg_mode` over the batch's response tokens N). Supervised form: D_k itself; policy-gradient
form: verl's clipped loss with advantage −D_k.

The token weights reaching the engine are those of the batch as the update sees it, after the
rollout correction of stale rows (trainer/staleness.py):

    ω_k = w_k · m_k · ρ_k      m_k: response_mask (0 on tokens the correction rejected);
                               ρ_k: rollout_is_weights (1 on fresh rows) in the supervised form of
                               a sampled-token mode only, else 1

The supervised sampled-token term D_k(y_k) is an estimate over y_k ~ π_behaviour, so a stale row's
token carries the same truncated importance weight as its policy-gradient term; a top-k term is
an expectation over the vocabulary at position k and needs none; the policy-gradient form gets
ρ_k from verl's own policy loss (`rollout_is_weights`), so it is not applied twice.

The engine calls the loss twice per micro-batch: on the student's logits (the top-k modes' logits
pass: verl's `compute_topk_loss` for forward_kl_topk, `jsd.jsd_topk` for jsd), then on the model
output for the loss itself.

Engine inputs (`engine_tensors`, at the engine boundary): verl's `teacher_logprobs` and
`teacher_ids` [B, P + R, k] in the padded prompt + response layout, where row P − 1 + i (P the
prompt width) holds the teacher's scores of response token i: the top-k ids and log-probs of
`teacher_topk_ids` / `teacher_topk_log_probs` [B, R, k], or for an estimator mode (k = 1) the
sampled token and `teacher_log_probs`; 0 elsewhere (rows no loss reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from verl import DataProto
from verl.trainer.distillation.losses import compute_topk_loss, distillation_loss
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import DistillationConfig
from verl.workers.utils.losses import ppo_loss

from verl_masopd.algos import jsd
from verl_masopd.algos.distillation import DistillationSettings
from verl_masopd.config.actor_loss import ActorLoss

WEIGHT = "distillation_weight"


@dataclass(frozen=True)
class DistillationActorLoss(ActorLoss):
    """verl's `ppo_loss` plus verl's distillation loss on the weighted teacher-scored tokens
    (module doc); picklable."""

    settings: DistillationSettings = DistillationSettings()

    @property
    def uses_topk(self) -> bool:
        return self.settings.uses_topk

    @cached_property
    def distillation(self) -> DistillationConfig:
        """verl's distillation config around the loss section (its teacher keys unused here)."""
        return DistillationConfig(distillation_loss=self.settings.verl_loss_config())

    def __call__(self, model_output=None, data=None, dp_group=None, student_logits=None, data_format="thd"):
        if student_logits is not None:
            return self._logits_pass(student_logits, data, data_format)
        policy, metrics = ppo_loss(self.config, model_output, data, dp_group)
        weighted = data.copy()
        weighted["response_mask"] = _like(data[WEIGHT], data["response_mask"])
        term, term_metrics = distillation_loss(self.config, self.distillation, model_output, weighted)
        metrics.update(term_metrics)
        metrics["distillation/loss"] = Metric(value=term.detach(), aggregation=AggregationType.SUM)
        return policy + term, metrics

    def _logits_pass(self, student_logits: torch.Tensor, data, data_format: str) -> dict[str, torch.Tensor]:
        if self.settings.loss_mode == jsd.NAME:
            return jsd.jsd_topk(
                student_logits,
                data["teacher_logprobs"],
                data["teacher_ids"],
                self.settings.jsd_beta,
                self.settings.log_prob_min_clamp,
            )
        return compute_topk_loss(self.config, self.distillation, data, student_logits, data_format)

    def engine_tensors(self, batch: DataProto) -> dict[str, torch.Tensor]:
        """verl's teacher tensors and the token weights w_k for the engine (module doc)."""
        prompt_width = batch.batch["prompts"].shape[1]
        if self.uses_topk:
            ids, log_probs = batch.batch["teacher_topk_ids"], batch.batch["teacher_topk_log_probs"]
        else:
            ids = batch.batch["responses"].unsqueeze(-1)
            log_probs = batch.batch["teacher_log_probs"].unsqueeze(-1)
        return {
            "teacher_ids": _sequence_rows(ids.long(), prompt_width),
            "teacher_logprobs": _sequence_rows(log_probs.float(), prompt_width),
            WEIGHT: self.token_weights(batch),
        }

    def token_weights(self, batch: DataProto) -> torch.Tensor:
        """ω_k = w_k · m_k · ρ_k [B, R] (module doc)."""
        weights = batch.batch[WEIGHT].float() * batch.batch["response_mask"].float()
        sampled_supervised = not (self.uses_topk or self.settings.use_policy_gradient)
        if sampled_supervised and "rollout_is_weights" in batch.batch.keys():
            weights = weights * batch.batch["rollout_is_weights"].float()
        return weights


def _sequence_rows(response_rows: torch.Tensor, prompt_width: int) -> torch.Tensor:
    """[B, R, k] response rows placed at rows P − 1 + i of a [B, P + R, k] tensor of zeros."""
    b, r, k = response_rows.shape
    out = response_rows.new_zeros((b, prompt_width + r, k))
    out[:, prompt_width - 1 : prompt_width - 1 + r] = response_rows
    return out


def _like(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`weight` [B, R] in the layout of the micro-batch's response mask (nested where it is)."""
    if weight.is_nested or not mask.is_nested:
        return weight
    lengths = mask.offsets().diff().tolist()
    return torch.nested.as_nested_tensor([w[:n] for w, n in zip(weight, lengths, strict=True)], layout=torch.jagged)
