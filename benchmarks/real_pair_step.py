"""A masopd step of the real pair split into its phases: the Qwen2.5-Coder-0.5B-Instruct
Reasoner–Tool-User team (one LoRA policy per role) under the 1.5B teacher, on GSM8K training rows.
Writes benchmarks/results/NAME.json (--name, default real_pair_step) and prints a table.

The step the issue sizes the comparison by: 4 problems × 2 episodes, horizon 1, replies of up to
256 tokens, paper prompts, `preset=small_cpu` with local engines, LoRA rank 16 (alpha 32).
`--set KEY=VALUE` adds Hydra overrides, e.g. `actor_rollout_ref.rollout.name=vllm` for the
policies' vLLM servers on CPU or `engines.dtype=bfloat16`. One warm-up step, then the mean of
`--steps` measured steps of `Trainer.train_step()`'s timing_s/* metrics (step_time.py's phases).

    VERL_PLATFORM=cpu python benchmarks/real_pair_step.py --gsm8k train.jsonl [--student DIR]
        [--teacher DIR] [--steps 1] [--set KEY=VALUE ...] [--name real_pair_step]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from real_pair_data import ROOT, gsm8k_parts  # noqa: E402
from results_file import save_result  # noqa: E402
from step_time import PHASES, step_times  # noqa: E402

MODELS = ROOT / ".cache" / "models"
STEP = [
    "preset=small_cpu",
    "engines.placement=local",
    "workflow.domain=math",
    "workflow.horizon=1",
    "data.train_batch_size=4",
    "rollout.group_size=2",
    "data.max_response_length=256",
    "actor_rollout_ref.model.lora_rank=16",
    "actor_rollout_ref.model.lora_alpha=32",
    "algorithm.adv_estimator=masopd",
    "trainer.logger=[console]",
    "trainer.save_freq=-1",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gsm8k", required=True, type=Path, help="openai/grade-school-math train.jsonl")
    p.add_argument("--student", default=str(MODELS / "qwen2.5-coder-0.5b-instruct"))
    p.add_argument("--teacher", default=str(MODELS / "qwen2.5-coder-1.5b-instruct"))
    p.add_argument("--steps", type=int, default=1, help="measured steps after the warm-up step")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Hydra override")
    p.add_argument("--name", default="real_pair_step")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="real_pair_step-"))
    train = gsm8k_parts(args.gsm8k, ROOT / ".cache" / "real_pair" / "data")["train"]
    overrides = [
        *STEP,
        f"students.path={args.student}",
        f"teacher.model_path={args.teacher}",
        f"data.train_files=[{train}]",
        f"trainer.default_local_dir={work / 'checkpoints'}",
        *args.set,
    ]
    times = step_times({"masopd": overrides}, args.steps)["masopd"]
    report = {
        "setup": {"overrides": overrides, "warmup_steps": 1, "measured_steps": args.steps},
        "seconds_per_step": times,
        "machine": {"cpu_count": os.cpu_count(), "machine": platform.machine()},
    }
    save_result(args.name, report)
    print(" | ".join(f"{phase} {times[phase]:.1f}s" for phase in (*PHASES, "total")))


if __name__ == "__main__":
    main()
