"""Calibration of a tiny-world domain: held-out team accuracy per ladder level of the teacher in
every seat and of the student system (prompt-only), measured with `python -m verl_masopd.eval`
(compact prompts, horizon 2, evaluation sampling), with the share of episodes that agree, each
role's format violations, and the build's time and steps from the weights' manifest.

    python benchmarks/tiny_world_calibration.py --domain math|code [--heldout N] [--max-new-tokens N]
        [--model NAME=PATH ...]

--model evaluates other checkpoints (e.g. pretraining snapshots) instead of the shipped pair.
Writes benchmarks/results/tiny_world_calibration_<domain>[_<NAME>...].json and prints it.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import save_result

from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.weights import MANIFEST

HORIZON = 2
MAX_NEW_TOKENS = {"math": 24, "code": 48}  # the longest demonstrated reply of the domain fits
HELDOUT = {"math": 400, "code": 200}


def evaluate(data: Path, model: str, out: Path, max_new_tokens: int) -> dict:
    """Accuracy per data source of `model` in every seat, the summary's team metrics, the wall time."""
    command = [
        *(sys.executable, "-m", "verl_masopd.eval", "--data", str(data), "--model", model),
        *("--workflow", "mas", "--prompt-style", world.PROMPT_STYLE, "--horizon", str(HORIZON)),
        *("--max-new-tokens", str(max_new_tokens), "--batch-size", "100", "--seed", "0", "--out", str(out)),
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = round(time.perf_counter() - start, 1)
    with open(out / "summary.csv") as f:
        summary = next(csv.DictReader(f))
    team = ("agreed_share", "turns_to_agreement", "revise_rate_at_fault", "hold_rate_correct")
    return {
        "eval_seconds": seconds,
        "by_source": world.accuracy_by_source(out / "records.jsonl"),
        **{key: float(summary[key]) for key in team},
        "format_violations": {
            k.split("/", 1)[1]: float(v) for k, v in summary.items() if k.startswith("format_violations/")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("code", "math"), default="math")
    parser.add_argument("--heldout", type=int, help="held-out problems (default: math 400, code 200)")
    parser.add_argument("--max-new-tokens", type=int, help="reply budget (default: math 24, code 48)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args()
    heldout = args.heldout or HELDOUT[args.domain]
    max_new_tokens = args.max_new_tokens or MAX_NEW_TOKENS[args.domain]
    work = Path(tempfile.mkdtemp(prefix="calibrate-"))
    _, data = world.ensure_data(work, args.domain, 1, heldout)
    models = dict(m.split("=", 1) for m in args.model) or world.models(args.domain)
    report = {
        "domain": args.domain,
        "heldout_problems": heldout,
        "settings": {"horizon": HORIZON, "max_new_tokens": max_new_tokens, "prompt_style": world.PROMPT_STYLE},
        "machine": "2-core CPU",
    }
    if not args.model:
        manifest = json.loads((Path(models["teacher"]).parent / MANIFEST).read_text())
        report["build"] = {k: manifest[k] for k in ("build_seconds", "steps", "final_loss", "command")}
    report["systems"] = {name: evaluate(data, path, work / name, max_new_tokens) for name, path in models.items()}
    suffix = "".join(f"_{name}" for name in models) if args.model else ""
    save_result(f"tiny_world_calibration_{args.domain}{suffix}", report)


if __name__ == "__main__":
    main()
