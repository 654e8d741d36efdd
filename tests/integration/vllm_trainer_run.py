"""Runs training steps on the vllm generation path on CPU in a Ray of its own and prints, after every
step, each policy's weight version, its servers' log-probs (vLLM's prompt log-probs) on fixed
requests and their largest gap to its engine's (verl's compute_log_prob), and the kinds of server
sets the trainer started, as one JSON line.

With rollout.max_off_policy >= 1 the servers go on playing the next rollouts after a step, so a
step's report carries instead every row the step's staleness check saw: its policy, lag, whether it
stayed trainable, and the smallest and largest importance weight over its response tokens
(`RecordedStaleness`); the served log-probs are reported before the first step (step 0) and after
the last, once the background rollout has stopped.

    python vllm_trainer_run.py STEPS OVERRIDE...
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

REQUESTS = [([5, 6, 7, 8], [9, 10, 11, 12]), ([5, 6, 7, 8, 20, 21, 22], [30, 31])]


def served_and_gap(policy, pad_id: int) -> tuple[list[float], float]:
    """The servers' log-probs of REQUESTS (flattened), and their largest gap to the engine's."""
    from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
    from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
    from verl_masopd.teacher.scoring import ScoreRequest

    requests = [ScoreRequest(c, r) for c, r in REQUESTS]
    # one request at a time: vLLM's CPU LoRA kernels fail on the prompt log-probs of two adapter
    # requests in one batch (punica_cpu's add_lora_logits indexes per request, not per token)
    scorer = ServerTeacherScorer(policy.backend.client)
    served = [asyncio.run(scorer.score([request]))[0] for request in requests]
    computed = asyncio.run(EngineTeacherScorer(policy.engine, pad_id).score(requests))
    return [x for row in served for x in row], max(abs(a - b) for s, c in zip(served, computed) for a, b in zip(s, c))


class RecordedStaleness:
    """The trainer's `Staleness`, recording the rows of each `apply` (module docstring)."""

    def __init__(self, staleness):
        self.staleness = staleness
        self.bound = staleness.bound
        self.rows: list[dict] = []

    def apply(self, batch, versions) -> dict[str, float]:
        from verl_masopd.trainer.staleness import version_lags

        lags = version_lags(batch, versions)
        metrics = self.staleness.apply(batch, versions)
        weights, mask = batch.batch["rollout_is_weights"], batch.batch["response_mask"] > 0
        self.rows = [
            {
                "policy": policy,
                "lag": int(lag),
                "trainable": bool(trainable),
                "weight_min": float(row_weights[row_mask].min()) if row_mask.any() else None,
                "weight_max": float(row_weights[row_mask].max()) if row_mask.any() else None,
            }
            for policy, lag, trainable, row_weights, row_mask in zip(
                batch.non_tensor_batch["policy"], lags, batch.batch["trainable"], weights, mask
            )
        ]
        return metrics


def main(steps: int, overrides: list[str]) -> None:
    import ray

    from verl_masopd.config import compose_config
    from verl_masopd.config.validate import validate_config
    from verl_masopd.trainer.loop import Trainer

    trainer = Trainer(validate_config(compose_config(overrides)))  # starts a local Ray of its own
    if trainer.staleness is not None:
        trainer.staleness = RecordedStaleness(trainer.staleness)

    def add_served(report: dict) -> None:
        scored = {name: served_and_gap(p, trainer.pad_id) for name, p in trainer.policies.items()}
        report["served"] = {name: served for name, (served, _) in scored.items()}
        report["gaps"] = {name: gap for name, (_, gap) in scored.items()}

    try:
        if trainer.staleness is not None:
            start = {"step": 0}
            add_served(start)
            print(json.dumps(start), flush=True)
        for _ in range(steps):
            metrics = trainer.train_step()
            report = {
                "step": trainer.step,
                "versions": {name: p.backend.version for name, p in trainer.policies.items()},
                "servers": sorted(type(s).__name__ for s in trainer.servers),
                "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
            }
            if trainer.staleness is not None:
                report["rows"] = trainer.staleness.rows
                if trainer.step == steps:
                    trainer.background.close()  # the servers keep the last step's weights
            if trainer.staleness is None or trainer.step == steps:
                add_served(report)
            print(json.dumps(report), flush=True)
    finally:
        trainer.close()
        ray.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main(int(sys.argv[1]), sys.argv[2:])
