"""Peak memory of every process and step time of masopd on SmolLM2-135M-Instruct (two policies and
a teacher, the math workflow), on the Hugging Face path and the vLLM path, with full fine-tuning
and with LoRA; and each step's split (rollout, teacher, log-probs, update).

    python -m verl_masopd.models fetch smollm2-135m-instruct --out DIR
    VERL_PLATFORM=cpu python benchmarks/real_model_memory.py --model DIR [--cases hf-full,vllm-full] [--steps 2]

Cases: `hf-full`, `hf-lora` (engines.placement=local, generation with the Hugging Face backend, one
process) and `vllm-full`, `vllm-lora` (engines.placement=ray, actor_rollout_ref.rollout.name=vllm
with vLLM's buffers bounded as docs/real-models.md says: each policy a verl worker plus its vLLM
server, the teacher a worker of its own; with LoRA one multi-LoRA server and the teacher the base
with the adapters off, teacher.backend=lora_base). Every case runs
in a process of its own under `preset=small_cpu` with --problems problems a step, two episodes a
problem, one turn and --response-tokens-token replies; a thread samples the resident memory (RSS)
of that process and of every process below it (Ray's workers and vLLM's servers) every 0.25 s
and keeps each one's high-water mark, named by its process title (`ray::ClassName` for Ray's
actors). Also recorded: the largest sum over all processes at one sample, each step's seconds and
its split from the trainer's `timing_s/` metrics, and the load average around each case, since
the machine may be shared. Writes benchmarks/results/NAME.json (--name, default real_model_memory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from child_case import run_case  # noqa: E402
from results_file import save_result  # noqa: E402

GIB = 2**30
# vLLM's buffers bounded to what a step sends (docs/real-models.md)
VLLM_SETTINGS = (
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.max_model_len=1280",
    "actor_rollout_ref.rollout.max_num_seqs=16",
    "actor_rollout_ref.rollout.max_num_batched_tokens=2048",
)
CASES = {
    "hf-full": ("engines.placement=local",),
    "hf-lora": (
        "engines.placement=local",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
    ),
    "vllm-full": ("engines.placement=ray", *VLLM_SETTINGS),
    "vllm-lora": (
        "engines.placement=ray",
        *VLLM_SETTINGS,
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "teacher.backend=lora_base",
    ),
}
SPLIT = ("rollout", "teacher", "log_prob", "update", "weight_sync")


class MemorySampler(threading.Thread):
    """High-water marks of this process and every descendant, by pid, with its most telling title:
    RSS (counts pages shared between processes, such as forked libraries, once per process) and PSS
    (each shared page split among the processes that map it), and the largest sum of each over all
    processes at one sample. The PSS sum is the memory the run occupies; the RSS sum overstates it."""

    def __init__(self, period_s: float = 0.5):
        super().__init__(daemon=True)
        import psutil

        self.root, self.period_s = psutil.Process(), period_s
        self.peaks: dict[int, tuple[str, int, int]] = {}
        self.largest_rss = self.largest_pss = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        import psutil

        total_rss = total_pss = 0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                memory, cmdline, parent = process.memory_full_info(), process.cmdline(), process.ppid()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            title = _title(cmdline)
            if "spawn_main" in " ".join(cmdline):  # a multiprocessing child (vLLM's engine core): by its parent
                title = f"spawned by {self.peaks.get(parent, ('?',))[0]}"
            total_rss += memory.rss
            total_pss += memory.pss
            old_title, old_rss, old_pss = self.peaks.get(process.pid, (title, 0, 0))
            self.peaks[process.pid] = (_telling(old_title, title), max(old_rss, memory.rss), max(old_pss, memory.pss))
        self.largest_rss = max(self.largest_rss, total_rss)
        self.largest_pss = max(self.largest_pss, total_pss)

    def report(self) -> dict:
        self.done.set()
        self.sample()
        rows = sorted((r for r in self.peaks.values() if r[1] > 100 * 2**20), key=lambda r: -r[2])
        return {
            "processes_over_100_mib": [
                {"process": t, "peak_rss_gib": round(rss / GIB, 2), "peak_pss_gib": round(pss / GIB, 2)}
                for t, rss, pss in rows
            ],
            "largest_rss_sum_at_one_sample_gib": round(self.largest_rss / GIB, 2),
            "largest_pss_sum_at_one_sample_gib": round(self.largest_pss / GIB, 2),
        }


def _telling(old: str, new: str) -> str:
    """A Ray actor's class name once seen (a worker starts as `setup_worker.py` or `ray::IDLE`)."""
    named = [t for t in (new, old) if t.startswith("ray::") and "IDLE" not in t]
    return named[0] if named else new


def _title(cmdline: list[str]) -> str:
    """`ray::ClassName` for Ray's actors (their title carries the method now running), else the
    command: this process, raylet, gcs_server, ..."""
    if not cmdline:
        return "?"
    head = cmdline[0]
    if head.startswith("ray::"):
        return head.split(".")[0].split()[0]
    if "python" in Path(head).name and len(cmdline) > 1:
        return " ".join(Path(a).name for a in cmdline[1:3])
    return Path(head).name


def child(args) -> None:
    """One case in this process; writes its JSON to --result (vLLM and Ray print after it ends)."""
    from verl_masopd.config import compose_config
    from verl_masopd.config.validate import validate_config
    from verl_masopd.trainer.loop import Trainer

    sampler = MemorySampler()
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="real-model-memory-") as root:
        data = Path(root) / "math.parquet"
        subprocess.run(
            [sys.executable, "-m", "data_prep", "builtin", "--domain", "math", "--output", str(data), "--n", "8"],
            check=True,
            capture_output=True,
        )
        overrides = [
            "preset=small_cpu",
            f"students.path={args.model}",
            f"teacher.model_path={args.model}",
            f"data.train_files=[{data}]",
            "workflow.domain=math",
            "algorithm.adv_estimator=masopd",
            f"data.train_batch_size={args.problems}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.problems}",
            f"data.max_response_length={args.response_tokens}",
            "rollout.group_size=2",
            "workflow.horizon=1",
            f"trainer.total_training_steps={args.steps}",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={root}/checkpoints",
            *CASES[args.child],
        ]
        started = time.perf_counter()
        trainer = Trainer(validate_config(compose_config(overrides)))
        build_s = time.perf_counter() - started
        steps = []
        try:
            for _ in range(args.steps):
                started = time.perf_counter()
                metrics = trainer.train_step()
                split = {k: round(metrics.get(f"timing_s/{k}", 0.0), 1) for k in SPLIT}
                steps.append({"step_s": round(time.perf_counter() - started, 1), "split_s": split})
        finally:
            trainer.close()
    memory = sampler.report()
    result = {"case": args.child, "build_s": round(build_s, 1), "steps": steps, **memory}
    Path(args.result).write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="SmolLM2-135M-Instruct's folder (verl_masopd.models fetch)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--problems", type=int, default=2)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--name", default="real_model_memory", help="results file name (benchmarks/results/NAME.json)")
    parser.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    cases = []
    for case in args.cases.split(","):
        command = [sys.executable, __file__, "--child", case, "--model", args.model, "--steps", str(args.steps)]
        command += ["--problems", str(args.problems), "--response-tokens", str(args.response_tokens)]
        cases.append(run_case(command, case))
    report = {
        "model": "SmolLM2-135M-Instruct (float32)",
        "setup": {
            "estimator": "masopd",
            "policies": 2,
            "teacher": "the same folder",
            "problems_per_step": args.problems,
            "episodes_per_problem": 2,
            "turns": 1,
            "response_tokens": args.response_tokens,
            "preset": "small_cpu",
            "vllm_kv_cache_gib_per_server": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        },
        "cases": cases,
        "note": "a shared 2-core machine: step times depend on the load averages recorded with each case",
    }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
