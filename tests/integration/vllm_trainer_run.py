"""Runs training steps on the vllm generation path on CPU in a Ray of its own and prints, after every
step, each policy's weight version and the largest gap between its servers' log-probs (vLLM's
prompt log-probs) and its engine's (verl's compute_log_prob) on fixed requests, as one JSON line.

    python vllm_trainer_run.py STEPS OVERRIDE...
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

REQUESTS = [([5, 6, 7, 8], [9, 10, 11, 12]), ([5, 6, 7, 8, 20, 21, 22], [30, 31])]


def gap(policy, pad_id: int) -> float:
    from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
    from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
    from verl_masopd.teacher.scoring import ScoreRequest

    requests = [ScoreRequest(c, r) for c, r in REQUESTS]
    served = asyncio.run(ServerTeacherScorer(policy.backend.client).score(requests))
    computed = asyncio.run(EngineTeacherScorer(policy.engine, pad_id).score(requests))
    return max(abs(a - b) for s, c in zip(served, computed) for a, b in zip(s, c))


def main(steps: int, overrides: list[str]) -> None:
    import ray

    from verl_masopd.config import compose_config
    from verl_masopd.trainer.loop import Trainer

    trainer = Trainer(compose_config(overrides))  # starts a local Ray of its own
    try:
        for _ in range(steps):
            metrics = trainer.train_step()
            report = {
                "step": trainer.step,
                "versions": {name: p.backend.version for name, p in trainer.policies.items()},
                "gaps": {name: gap(p, trainer.pad_id) for name, p in trainer.policies.items()},
                "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
            }
            print(json.dumps(report), flush=True)
    finally:
        trainer.close()
        ray.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main(int(sys.argv[1]), sys.argv[2:])
