"""Calibration of a tiny-world domain: held-out team accuracy per ladder level of the teacher in
every seat and of the student system (prompt-only), measured with `python -m verl_masopd.eval`,
next to the build's time and pretraining speed from the weights' manifest.

Usage: python benchmarks/calibrate_tiny_world.py --domain code [--heldout 200] [--horizon 2]
           [--max-new-tokens 80] [--model NAME=PATH ...]
--model evaluates other checkpoints (e.g. pretraining snapshots) instead of the shipped pair.
Writes benchmarks/results/tiny_world_<domain>_calibration[_<NAME>...].json and prints it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import save_result

from data_prep.writer import write_rows
from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.tiny_world.weights import MANIFEST


def evaluate(data: Path, model: str, out: Path, args) -> dict:
    """Accuracy per data source of `model` in every seat, and the evaluation's wall time."""
    command = [
        sys.executable,
        "-m",
        "verl_masopd.eval",
        *("--data", str(data), "--model", model, "--workflow", "mas", "--prompt-style", world.PROMPT_STYLE),
        *("--horizon", str(args.horizon), "--max-new-tokens", str(args.max_new_tokens)),
        *("--batch-size", "100", "--seed", "0", "--out", str(out)),
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = round(time.perf_counter() - start, 1)
    return {"eval_seconds": seconds, "by_source": world.accuracy_by_source(out / "records.jsonl")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="code")
    parser.add_argument("--heldout", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="calibrate-"))
    heldout = work / "heldout.parquet"
    write_rows(world.task_rows(args.domain, HELDOUT_START, args.heldout, "test"), heldout)
    models = dict(m.split("=", 1) for m in args.model) or world.models(args.domain)
    report = {
        "domain": args.domain,
        "heldout_problems": args.heldout,
        "horizon": args.horizon,
        "max_new_tokens": args.max_new_tokens,
        "machine": "2-core CPU shared with other jobs",
    }
    if not args.model:
        manifest = json.loads((Path(models["teacher"]).parent / MANIFEST).read_text())
        steps = recipe(args.domain).schedule.steps
        report["build"] = {
            "seconds": manifest["build_seconds"],
            "steps": steps,
            "steps_per_second": round(steps / manifest["build_seconds"], 3),
            "model_steps": manifest["steps"],
            "final_loss": manifest["final_loss"],
        }
    report["systems"] = {name: evaluate(heldout, path, work / name, args) for name, path in models.items()}
    suffix = "".join(f"_{name}" for name in models) if args.model else ""
    save_result(f"tiny_world_{args.domain}_calibration{suffix}", report)


if __name__ == "__main__":
    main()
