"""Staleness of the rollout beside the update: each row's version lag, the bound, and verl's
rollout correction of the stale rows, per policy.

Every policy has its own weight version v_p: the step whose weights its generation backend last
received (`Policy.version`). A row sampled by weights of version v (the batch column
"policy_version", `Sample.version`) is trained when its policy is at version V; its lag is
ℓ = V − v ≥ 0.

- bound: a row with ℓ > rollout.max_off_policy is dropped (batch["trainable"] false), never
  regenerated; the rollout beside the update (trainer/background_rollout.py) starts each rollout
  late enough that none is, so the drop is the guarantee, not the schedule.
- correction: the rows of one policy with 1 ≤ ℓ ≤ bound go through verl's
  `compute_rollout_correction_and_rejection_mask` with the settings of algorithm.rollout_correction
  and log r_k = log π_now(y_k) − log π_rollout(y_k) (old_log_probs − rollout_log_probs: the log-probs
  the engine computes now and those recorded at generation, both of softmax(z / T) at the rollout's
  temperature, so r_k = 1 wherever the weights did not change; top-k/top-p sampling, whose recorded
  log-probs are of the truncated distribution, is refused beside the update). With the defaults,
  token-level truncated importance weights w_k = min(r_k, 2) reach the loss as
  batch["rollout_is_weights"] (verl's ppo_loss multiplies each token's policy-gradient term by w_k,
  the engine's distillation loss its sampled-token supervised term, trainer/distillation_loss.py),
  and tokens with r_k ∉ [0.2, 5] are rejected (response_mask 0: out of every term of the loss, the
  in-engine distillation term included). Rows with ℓ = 0 were sampled by the current weights:
  weight 1, mask unchanged.

Metrics, per policy p (offpolicy/<p>/...): lag_mean and lag_max over p's rows; dropped, the rows
over the bound; is_weight_mean/min/max over the response tokens of p's rows that stay in the loss
(neither dropped nor rejected); rejected, the share of p's response tokens the rejection masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask


def version_lags(batch: DataProto, versions: Mapping[str, int]) -> np.ndarray:
    """ℓ per row: its policy's current version (`versions[policy]`) minus the version that sampled it."""
    policies = batch.non_tensor_batch["policy"]
    sampled = batch.non_tensor_batch["policy_version"].astype(np.int64)
    lags = np.array([versions[p] for p in policies], dtype=np.int64) - sampled
    if (lags < 0).any():
        raise RuntimeError(f"rows sampled by a version newer than their policy's: lags {sorted(set(lags))}")
    return lags


@dataclass(frozen=True)
class Staleness:
    """The bound k = rollout.max_off_policy and verl's `RolloutCorrectionConfig` for the stale rows."""

    bound: int
    correction: RolloutCorrectionConfig

    def apply(self, batch: DataProto, versions: Mapping[str, int]) -> dict[str, float]:
        """Drop the rows over the bound, correct the stale ones in place (module doc); the metrics."""
        lags = version_lags(batch, versions)
        keep = lags <= self.bound
        if "trainable" in batch.batch.keys():
            keep &= batch.batch["trainable"].numpy().astype(bool)
        batch.batch["trainable"] = torch.from_numpy(keep)
        mask = batch.batch["response_mask"]
        weights = torch.ones_like(batch.batch["old_log_probs"])
        policies = batch.non_tensor_batch["policy"]
        metrics: dict[str, float] = {}
        for policy in sorted(set(policies)):
            rows = np.flatnonzero(policies == policy)
            before = float(mask[rows].sum())
            stale = torch.from_numpy(rows[(lags[rows] > 0) & keep[rows]])
            if len(stale) and mask[stale].any():
                corrected, new_mask, _ = compute_rollout_correction_and_rejection_mask(
                    batch.batch["old_log_probs"][stale],
                    batch.batch["rollout_log_probs"][stale],
                    mask[stale].float(),
                    rollout_is=self.correction.rollout_is,
                    rollout_is_threshold=self.correction.rollout_is_threshold,
                    rollout_is_batch_normalize=self.correction.rollout_is_batch_normalize,
                    rollout_rs=self.correction.rollout_rs,
                    rollout_rs_threshold=self.correction.rollout_rs_threshold,
                )
                if corrected is not None:
                    weights[stale] = corrected.batch["rollout_is_weights"].to(weights.dtype)
                mask[stale] = new_mask.to(mask.dtype)
            metrics |= _policy_metrics(policy, lags[rows], keep[rows], weights[rows], mask[rows], before)
        batch.batch["rollout_is_weights"] = weights
        return metrics


def _policy_metrics(
    policy: str, lags: np.ndarray, keep: np.ndarray, weights: torch.Tensor, mask: torch.Tensor, before: float
) -> dict[str, float]:
    prefix = f"offpolicy/{policy}"
    out = {
        f"{prefix}/lag_mean": float(lags.mean()),
        f"{prefix}/lag_max": float(lags.max()),
        f"{prefix}/dropped": float((~keep).sum()),
        f"{prefix}/rejected": 1.0 - float(mask.sum()) / before if before else 0.0,
    }
    kept = weights[(mask > 0) & torch.from_numpy(keep).unsqueeze(-1)]
    if len(kept):
        out |= {
            f"{prefix}/is_weight_mean": float(kept.mean()),
            f"{prefix}/is_weight_min": float(kept.min()),
            f"{prefix}/is_weight_max": float(kept.max()),
        }
    return out
