"""Seconds per training step, lockstep against the rollout beside the update
(rollout.max_off_policy 0, 1 and 2), on the tiny world's math setup (the shipped student and
teacher, the tiny_world preset, the hf generation path, local engines, CPU).

Each bound trains its own run from the same start: one warm-up step, then --steps measured steps
of wall time around `Trainer.train_step()` (with the bound >= 1 the first step's rollout has no
update to overlap, so the warm-up step is left out), and the per-step mean of the off-policy
metrics (version lag, importance weights, the share rejected). The runs go one after the other,
not in turns: a background rollout would run beside the other runs' steps. The machine's load
averages before and after each run are recorded: the cores are shared, so a gain or a loss is read
against them. Writes benchmarks/results/NAME.json and prints a table.

    VERL_PLATFORM=cpu python benchmarks/async_step.py [--steps 4] [--bounds 0 1 2] [--estimator masopd] [--name NAME]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from results_file import save_result

from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.tiny_world import world  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402


def run(overrides: list[str], steps: int) -> dict:
    """Wall seconds of each measured step, the mean of every timing_s/* and offpolicy/* metric, the
    load averages before and after."""
    load_before = os.getloadavg()
    trainer = Trainer(validate_config(compose_config(overrides)))
    try:
        trainer.train_step()
        walls, metrics = [], []
        for _ in range(steps):
            start = time.perf_counter()
            metrics.append(trainer.train_step())
            walls.append(time.perf_counter() - start)
    finally:
        trainer.close()
    keys = sorted({k for m in metrics for k in m if k.startswith(("timing_s/", "offpolicy/"))})
    return {
        "seconds_per_step": float(np.mean(walls)),
        "step_seconds": walls,
        "means": {k: float(np.mean([m[k] for m in metrics if k in m])) for k in keys},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="measured steps after the warm-up step")
    parser.add_argument("--bounds", type=int, nargs="*", default=[0, 1, 2], help="rollout.max_off_policy values")
    parser.add_argument("--estimator", default="masopd", help="algorithm.adv_estimator")
    parser.add_argument("--problems", type=int, default=16, help="training problems")
    parser.add_argument("--name", default="async_step", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="async_step-"))
    models = world.models("math")
    data, _ = world.ensure_data(work, "math", args.problems, 1)
    common = [
        "preset=tiny_world",
        "engines.placement=local",
        "workflow.domain=math",
        f"students.path={models['student']}",
        f"teacher.model_path={models['teacher']}",
        f"data.train_files=[{data}]",
        f"algorithm.adv_estimator={args.estimator}",
        "trainer.logger=[console]",
        "trainer.save_freq=-1",
    ]
    runs = {}
    for bound in args.bounds:
        folder = f"trainer.default_local_dir={work / str(bound)}"
        runs[bound] = run([*common, f"rollout.max_off_policy={bound}", folder], args.steps)
    cfg = compose_config(common)
    setup = {
        "world": "tiny world, math",
        "estimator": args.estimator,
        "generation_path": "hf",
        "problems_per_step": cfg.data.train_batch_size,
        "group_size": cfg.rollout.group_size,
        "horizon": cfg.workflow.horizon,
        "max_response_tokens": cfg.data.max_response_length,
        "turn_barrier": cfg.rollout.turn_barrier,
        "warmup_steps": 1,
        "measured_steps": args.steps,
        "torch_threads": torch.get_num_threads(),
    }
    base = runs[args.bounds[0]]["seconds_per_step"]
    report = {
        "setup": setup,
        "runs": {f"max_off_policy={b}": r for b, r in runs.items()},
        f"speedup_over_max_off_policy={args.bounds[0]}": {
            f"max_off_policy={b}": base / r["seconds_per_step"] for b, r in runs.items()
        },
    }
    path = save_result(args.name, report, echo=False)
    print("| max_off_policy | s/step | lag mean (max) | load before → after |")
    print("|---|---|---|---|")
    for bound, r in runs.items():
        lags = [v for k, v in r["means"].items() if k.endswith("/lag_mean")]
        top = [v for k, v in r["means"].items() if k.endswith("/lag_max")]
        lag = f"{np.mean(lags):.2f} ({max(top):.0f})" if lags else "0 (0)"
        print(
            f"| {bound} | {r['seconds_per_step']:.2f} | {lag} | "
            f"{r['load_average_before'][0]:.2f} → {r['load_average_after'][0]:.2f} |"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
