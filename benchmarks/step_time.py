"""One training step's time broken down by phase for `grpo`, `opd` and `masopd`, as ratios to `grpo`.

The same setup for every estimator (local engines, the same seed): with --world, the tiny world's
shipped student and teacher on its training problems with the tiny_world preset (the quickstart's
step); without, the CPU preset with the random tiny student and small teacher on the built-in
problems of the domain. One warm-up step, then the mean of --steps measured steps of
`Trainer.train_step()`'s timing_s/* metrics (rollout, log_prob, teacher, advantage, update,
weight_sync), the estimators taking turns step by step. Writes benchmarks/results/NAME.json and
prints a table.

    VERL_PLATFORM=cpu python benchmarks/step_time.py [--world] [--domain math] [--steps 2] [--max-prompt-length N]
        [--context-layout role_last] [--share-prefix true|false] [--name NAME]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from results_file import save_result

from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.tiny_world import world  # noqa: E402
from verl_masopd.tiny_world.models import cached_model  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402

ESTIMATORS = ("grpo", "opd", "masopd")
PHASES = ("rollout", "log_prob", "teacher", "advantage", "update", "weight_sync")


def step_times(overrides: dict[str, list[str]], steps: int) -> dict[str, dict[str, float]]:
    """Mean seconds per phase of each estimator over `steps` steps after one warm-up step; 'total'
    is their sum. The estimators take turns step by step, so a change in the machine's load falls
    on all of them alike."""
    trainers = {}
    try:
        for estimator, estimator_overrides in overrides.items():
            trainers[estimator] = Trainer(validate_config(compose_config(estimator_overrides)))
            trainers[estimator].train_step()
        runs = {estimator: [] for estimator in trainers}
        for _ in range(steps):
            for estimator, trainer in trainers.items():
                runs[estimator].append(trainer.train_step())
    finally:
        for trainer in trainers.values():
            trainer.close()
    times = {}
    for estimator, metrics in runs.items():
        times[estimator] = {p: sum(m.get(f"timing_s/{p}", 0.0) for m in metrics) / steps for p in PHASES}
        times[estimator]["total"] = sum(times[estimator].values())
    return times


def ratios(times: dict[str, dict[str, float]]) -> dict[str, dict[str, float | None]]:
    """times[e][phase] / times['grpo'][phase]; None where grpo spends no time in the phase."""
    base = times["grpo"]
    return {e: {p: (t[p] / base[p] if base[p] > 0 else None) for p in t} for e, t in times.items()}


def table(times: dict[str, dict[str, float]], ratio: dict[str, dict[str, float | None]]) -> str:
    columns = (*PHASES, "total")
    lines = ["| estimator | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for e, t in times.items():
        cells = [f"{t[c]:.2f}s" + ("" if ratio[e][c] is None else f" ({ratio[e][c]:.2f}x)") for c in columns]
        lines.append(f"| {e} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def builtin_problems(work: Path, domain: str, n: int) -> Path:
    data = work / f"{domain}.parquet"
    command = ["-m", "data_prep", "builtin", "--domain", domain, "--output", str(data), "--n", str(n)]
    subprocess.run([sys.executable, *command], check=True, capture_output=True)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("code", "math"), default="math")
    parser.add_argument("--steps", type=int, default=2, help="measured steps after the warm-up step")
    parser.add_argument("--problems", type=int, default=8, help="built-in problems in the training file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt-length", type=int, help="data.max_prompt_length (default: the preset's)")
    parser.add_argument("--context-layout", choices=("role_first", "role_last"), help="workflow.context_layout")
    parser.add_argument(
        "--share-prefix", choices=("true", "false"), help="teacher.share_prefix (default: the config's, on for CPU)"
    )
    parser.add_argument("--world", action="store_true", help="the tiny world's models, problems and preset")
    parser.add_argument("--name", default="step_time", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="step_time-"))
    if args.world:
        models = world.models(args.domain)
        student, teacher = models["student"], models["teacher"]
        data, _ = world.ensure_data(work, args.domain, args.problems, 1)
        preset = "tiny_world"
        sizes = {"student": "tiny world student", "teacher": "tiny world teacher"}
    else:
        student = cached_model(work / "models", size="tiny", seed=0)
        teacher = cached_model(work / "models", size="small", seed=1)
        data = builtin_problems(work, args.domain, args.problems)
        preset = "cpu"
        sizes = {"student": "tiny (0.9M parameters)", "teacher": "small (9.6M parameters)"}
    common = [
        f"preset={preset}",
        "engines.placement=local",
        f"workflow.domain={args.domain}",
        f"students.path={student}",
        f"teacher.model_path={teacher}",
        f"data.train_files=[{data}]",
        f"trainer.seed={args.seed}",
        "trainer.logger=[console]",
        "trainer.save_freq=-1",
    ]
    if args.max_prompt_length:
        common.append(f"data.max_prompt_length={args.max_prompt_length}")
    if args.context_layout:
        common.append(f"workflow.context_layout={args.context_layout}")
    if args.share_prefix:
        common.append(f"teacher.share_prefix={args.share_prefix}")
    times = step_times(
        {e: [*common, f"algorithm.adv_estimator={e}", f"trainer.default_local_dir={work / e}"] for e in ESTIMATORS},
        args.steps,
    )
    ratio = ratios(times)
    cfg = compose_config(common)
    setup = {
        "domain": args.domain,
        "problems_per_step": cfg.data.train_batch_size,
        "group_size": cfg.rollout.group_size,
        "horizon": cfg.workflow.horizon,
        "max_response_tokens": cfg.data.max_response_length,
        "max_prompt_tokens": cfg.data.max_prompt_length,
        "context_layout": cfg.workflow.context_layout,
        "teacher_share_prefix": validate_config(
            compose_config([*common, "algorithm.adv_estimator=masopd"])
        ).teacher.share_prefix,
        "machine_note": "the estimators take turns step by step",
        "preset": preset,
        **sizes,
        "placement": "local",
        "warmup_steps": 1,
        "measured_steps": args.steps,
        "seed": args.seed,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
    }
    path = save_result(args.name, {"setup": setup, "seconds_per_step": times, "ratio_to_grpo": ratio}, echo=False)
    print(table(times, ratio))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
