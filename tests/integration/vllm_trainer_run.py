"""Runs training steps on the vllm generation path on CPU in a Ray of its own and prints, after every
step, each policy's weight version, its servers' log-probs (vLLM's prompt log-probs) on fixed
requests and their largest gap to its engine's (verl's compute_log_prob), and the kinds of server
sets the trainer started, as one JSON line.

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


def main(steps: int, overrides: list[str]) -> None:
    import ray

    from verl_masopd.config import compose_config
    from verl_masopd.trainer.config import validate_config
    from verl_masopd.trainer.loop import Trainer

    trainer = Trainer(validate_config(compose_config(overrides)))  # starts a local Ray of its own
    try:
        for _ in range(steps):
            metrics = trainer.train_step()
            scored = {name: served_and_gap(p, trainer.pad_id) for name, p in trainer.policies.items()}
            report = {
                "step": trainer.step,
                "versions": {name: p.backend.version for name, p in trainer.policies.items()},
                "served": {name: served for name, (served, _) in scored.items()},
                "gaps": {name: gap for name, (_, gap) in scored.items()},
                "servers": sorted(type(s).__name__ for s in trainer.servers),
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
