"""Memory and step time of MAS-OPD with one policy per agent, full fine-tuning against LoRA, on the
tiny world; and the same worked out on paper for a 1.7B student on GPUs.

    VERL_PLATFORM=cpu python benchmarks/lora_memory.py [--agents 2,4,8] [--rank 8] [--steps 2]

Measured: for each number of agents n (math, n/2 agents per role, workflow.policy_sharing=agent,
so n policies, each an engine of its own) and each mode (full; LoRA of --rank, α = 2r, all-linear),
one process (local engines, the tiny world's student and teacher and preset) builds the trainer,
runs one warm-up step and --steps measured steps; it reports its peak resident memory (getrusage)
and its memory after the build, the mean step seconds and their phases. Modes and sizes run one
after another, so read ratios within the run.

On paper (`paper_estimate`): a Qwen3-1.7B student (its published config: hidden 2048, 28 layers,
MLP 6144, 16 query and 8 key/value heads of 128, vocabulary 151,936, tied embeddings), parameter
counts from the model built on the meta device with peft; bytes per policy in verl's FSDP engine
with fp32 master weights: full 16 B per parameter (weights 4, gradients 4, Adam's two moments 8);
LoRA 4 B per frozen base parameter + 16 B per adapter parameter; the vLLM server of a policy 2 B
per parameter (bf16 weights) before its KV cache, and with multi-LoRA one server for all policies
plus 2 B per adapter parameter each. Activations and the KV cache are left out (they depend on
batch and length, not on the mode). Writes benchmarks/results/lora_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from results_file import save_result  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config  # noqa: E402

PHASES = ("rollout", "log_prob", "teacher", "advantage", "update", "weight_sync")
QWEN3_1_7B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    tie_word_embeddings=True,
)
GIB = 2**30


def parameter_counts(config, rank: int) -> dict[str, int]:
    """{"total", "adapter"}: the model's parameters and those of a rank-`rank` all-linear adapter."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    adapter = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    trainable, _ = adapter.get_nb_trainable_parameters()
    return {"total": total, "adapter": trainable}


def paper_estimate(rank: int, agents: list[int]) -> dict:
    counts = parameter_counts(Qwen3Config(**QWEN3_1_7B), rank)
    n, a = counts["total"], counts["adapter"]
    per_policy = {"full": 16 * n / GIB, "lora": (4 * n + 16 * a) / GIB}
    rows = {}
    for k in agents:
        rows[str(k)] = {
            "training_gib_full": round(k * per_policy["full"], 1),
            "training_gib_lora_base_per_policy": round(k * per_policy["lora"], 1),
            "training_gib_lora_one_shared_base": round((4 * n + 16 * a * k) / GIB, 1),
            "serving_gib_one_server_per_policy": round(k * 2 * n / GIB, 1),
            "serving_gib_one_multi_lora_server": round((2 * n + 2 * a * k) / GIB, 1),
        }
    return {
        "model": "Qwen3-1.7B (published config)",
        "rank": rank,
        "parameters": n,
        "adapter_parameters": a,
        "gib_per_policy": {k: round(v, 2) for k, v in per_policy.items()},
        "by_agents": rows,
    }


def child(args) -> None:
    """One measurement (run in a process of its own); prints its JSON."""
    from verl_masopd.config import compose_config
    from verl_masopd.config.validate import validate_config
    from verl_masopd.tiny_world import world
    from verl_masopd.trainer.loop import Trainer

    work = Path(tempfile.mkdtemp(prefix="lora_memory-"))
    models = world.models("math")
    data, _ = world.ensure_data(work, "math", 32, 1)
    overrides = [
        "preset=tiny_world",
        "engines.placement=local",
        "workflow.domain=math",
        f"workflow.agents_per_role={args.child_agents // 2}",
        "workflow.policy_sharing=agent",
        f"students.path={models['student']}",
        f"teacher.model_path={models['teacher']}",
        f"data.train_files=[{data}]",
        "trainer.logger=[console]",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={work / 'checkpoints'}",
    ]
    if args.child_mode == "lora":
        overrides += [
            f"actor_rollout_ref.model.lora_rank={args.rank}",
            f"actor_rollout_ref.model.lora_alpha={2 * args.rank}",
        ]
    trainer = Trainer(validate_config(compose_config(overrides)))
    try:
        built_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        trainer.train_step()
        steps = [trainer.train_step() for _ in range(args.steps)]
    finally:
        trainer.close()
    phases = {p: sum(m.get(f"timing_s/{p}", 0.0) for m in steps) / len(steps) for p in PHASES}
    print(
        json.dumps(
            {
                "policies": len(trainer.policies),
                "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "rss_after_build_gib": built_kib / 2**20,
                "step_s": sum(phases.values()),
                "phases_s": phases,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="2,4,8", help="agents (= policies) per run, each even")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="measured steps after the warm-up step")
    parser.add_argument("--child-agents", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-mode", choices=("full", "lora"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_mode:
        child(args)
        return
    agents = [int(k) for k in args.agents.split(",") if k]
    from verl_masopd.tiny_world import world

    student = world.models("math")["student"]
    runs = {}
    for k in agents:
        for mode in ("full", "lora"):
            command = [sys.executable, __file__, "--child-agents", str(k), "--child-mode", mode]
            command += ["--rank", str(args.rank), "--steps", str(args.steps)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[f"{k} agents, {mode}"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{k} agents, {mode}: {runs[f'{k} agents, {mode}']}", flush=True)
    report = {
        "setup": {
            "world": "tiny world, math, the tiny_world preset, masopd, policy_sharing=agent, local engines",
            "student_parameters": parameter_counts(AutoConfig.from_pretrained(student), args.rank),
            "rank": args.rank,
            "alpha": 2 * args.rank,
            "measured_steps": args.steps,
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "measured": runs,
        "paper_1_7b": paper_estimate(args.rank, agents),
    }
    save_result("lora_memory", report)


if __name__ == "__main__":
    main()
