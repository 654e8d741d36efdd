"""The same benchmark on two source trees, alternated, in one run: the cost of a restructure.

Runs `benchmarks/rollout_overhead.py` (and `benchmarks/step_time.py` with `--step-time`) from
each tree in turn, `--rounds` times, each under `PYTHONPATH=<tree>`, and reads the JSON each run
wrote into its own tree's results folder. Alternating the trees spreads any other load on the
machine over both. Reports, per measurement, the median of each tree and after/before − 1.

    python benchmarks/paired_trees.py --before DIR --after DIR [--rounds 3] [--step-time]
Writes benchmarks/results/paired_trees.json (or --name).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from results_file import save_result


def run(tree: Path, script: str, args: list[str], result: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "VERL_PLATFORM": "cpu"}
    subprocess.run(
        [sys.executable, str(tree / "benchmarks" / script), *args],
        check=True,
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((tree / "benchmarks" / "results" / f"{result}.json").read_text())


def rollout_numbers(report: dict) -> dict[str, float]:
    out = {
        f"standin_{r['answers']}_{r['latency_s']}s/overhead_ms_per_episode_turn": r["overhead_ms_per_episode_turn"]
        for r in report["standin_generator"]
    }
    hf = report["hf_tiny_model"]
    out["hf_tiny_model/wall_s"] = hf["wall_s"]
    out["hf_tiny_model/share_outside_generation"] = hf["share_outside_generation"]
    return out


def step_numbers(report: dict) -> dict[str, float]:
    return {
        f"step_s/{name}/{phase}": t
        for name, phases in report["seconds_per_step"].items()
        for phase, t in phases.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-time", action="store_true")
    parser.add_argument("--name", default="paired_trees")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            numbers = rollout_numbers(run(tree, "rollout_overhead.py", [], "rollout_overhead"))
            if args.step_time:
                numbers |= step_numbers(run(tree, "step_time.py", ["--name", "step_time_paired"], "step_time_paired"))
            for key, value in numbers.items():
                samples[label].setdefault(key, []).append(value)
    medians = {label: {k: statistics.median(v) for k, v in s.items()} for label, s in samples.items()}
    change = {k: medians["after"][k] / medians["before"][k] - 1 for k in medians["before"] if medians["before"][k]}
    save_result(
        args.name,
        {
            "trees": {k: str(v) for k, v in trees.items()},
            "rounds": args.rounds,
            "samples": samples,
            "medians": medians,
            "after_over_before_minus_1": change,
        },
    )


if __name__ == "__main__":
    main()
