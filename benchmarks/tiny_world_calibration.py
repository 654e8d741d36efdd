"""Calibration of the tiny world: held-out team accuracy per ladder level of the teacher in every
seat and of the student system (prompt-only), measured with `python -m verl_masopd.eval` (compact
prompts, horizon 2, evaluation sampling), and the pretraining time the manifest records. Writes
benchmarks/results/tiny_world_calibration.json.

    python benchmarks/tiny_world_calibration.py [--domain math] [--heldout 400]
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

from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.weights import MANIFEST, WEIGHTS

HORIZON, MAX_NEW_TOKENS = 2, 24


def evaluate(model: str, val_file: Path, out: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "verl_masopd.eval", "--data", str(val_file), "--model", model]
        + ["--prompt-style", world.PROMPT_STYLE, "--horizon", str(HORIZON), "--max-new-tokens", str(MAX_NEW_TOKENS)]
        + ["--batch-size", "100", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return world.accuracy_by_source(out / "records.jsonl"), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="math")
    parser.add_argument("--heldout", type=int, default=400)
    args = parser.parse_args()
    models = world.models(args.domain)
    manifest = json.loads((WEIGHTS / args.domain / MANIFEST).read_text())
    report = {
        "domain": args.domain,
        "machine": "2 CPU cores shared with other jobs (load 15-35); pretraining on one torch thread",
        "pretraining_seconds": manifest["build_seconds"],
        "pretraining_steps": manifest["steps"],
        "heldout_problems": args.heldout,
        "settings": {"horizon": HORIZON, "max_new_tokens": MAX_NEW_TOKENS, "prompt_style": world.PROMPT_STYLE},
    }
    with tempfile.TemporaryDirectory() as tmp:
        _, val_file = world.ensure_data(Path(tmp) / "data", args.domain, 1, args.heldout)
        for name in ("teacher", "student"):
            accuracy, seconds = evaluate(models[name], val_file, Path(tmp) / name)
            report[f"{name}_system"] = {"accuracy": accuracy, "eval_seconds": round(seconds, 1)}
    save_result(f"tiny_world_calibration_{args.domain}", report)


if __name__ == "__main__":
    main()
