"""Does a real model learn here? SmolLM2-135M-Instruct's Reasoner–Tool-User team on the arithmetic
ladder as plain-text problems, four methods × seeds at one step budget, evaluated on held-out
problems.

    python benchmarks/real_model_learning.py [--model DIR] [--state DIR] [--settings SETTINGS.json]
        [--methods a,b] [--seeds 0,1] [--save]

Everything the runs depend on is in the settings file (benchmarks/results/real_model_learning/
settings.json, fixed before the first run): the problems (the tiny world's math ladder,
verl_masopd/tiny_world/math_tasks.py: the first `train_problems` training problems and the first
`eval_problems` held-out ones, levels 1-4 in turn: "What is 7 - 3?" ... short word problems), the workflow
(horizon, reply length), the LoRA adapter, learning rate, batch, group size, steps, seeds and each
method's overrides of `python -m verl_masopd.train` (preset=small_cpu, engines in this process).
The methods: `prompt_only` (the untrained team), `mas_grpo` (GRPO on the team's reward),
`opd_self` (OPD from the self-distillation teacher: each policy at step 0 reading the reference
answer, teacher.source=frozen, teacher.privileged=reference) and `masopd_self` (MAS-OPD with that
teacher). Seed s trains with trainer.seed=s and evaluates with --seed s, so the seeds pair.

Layout under --state (default .cache/real_model_learning):
    model/                          the fetched model (python -m verl_masopd.models fetch), unless --model
    data/                           tiny_math_train<N>.parquet, tiny_math_heldout<M>.parquet
    cells/<method>/seed<s>/         train.log, checkpoints/ (trained methods), eval/, eval.log, done.json
    report.json, report.md          per cell: accuracy, format violations per role, agreement; per
                                    method: means over seeds; each method minus prompt_only, paired by
                                    seed (verl_masopd/report/paired.py)
Resumable: a cell with done.json is skipped; one without (killed part-way) is deleted and redone.
Across sessions (a new checkout has no --state): --archive DIR keeps each finished cell's done.json
and its evaluation's summary and records in DIR/<method>/seed<s>/, and a cell found there is not
run again.
--save also copies the report to benchmarks/results/real_model_learning/results.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from verl_masopd.report.paired import paired_difference
from verl_masopd.tiny_world.world import ensure_data

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "real_model_learning"
DONE = "done.json"
MEASURES = ("accuracy", "agreed_share", "format_violations/reasoner", "format_violations/tool_user")
BASELINE = "prompt_only"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="SmolLM2-135M-Instruct folder (default: fetched into STATE/model)")
    p.add_argument("--state", default=str(ROOT / ".cache" / "real_model_learning"))
    p.add_argument("--settings", default=str(RESULTS / "settings.json"))
    p.add_argument("--methods", help="comma-separated subset of the settings' methods")
    p.add_argument("--seeds", help="comma-separated subset of the settings' seeds")
    p.add_argument("--archive", help="keep finished cells here across sessions")
    p.add_argument("--save", action="store_true", help="also write benchmarks/results/real_model_learning/results.*")
    return p


def run(command: list[str], log: Path, env: dict | None = None) -> None:
    """Run `command` from the repository root with its output in `log`; stop with one line on failure."""
    with open(log, "w") as out:
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=out, env=env).returncode
    if code:
        raise SystemExit(f"real_model_learning: {command[2]} failed (exit {code}), see {log}")


def fetch_model(state: Path) -> str:
    out = state / "model"
    state.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "verl_masopd.models", "fetch", "smollm2-135m-instruct", "--out", str(out)],
        state / "fetch.log")  # fmt: skip
    return str(out)


def problems(state: Path, task: dict) -> tuple[str, str]:
    """(train, held-out) parquet files of the ladder: training problems [0, train_problems),
    held-out problems [HELDOUT_START, HELDOUT_START + eval_problems)."""
    train, heldout = ensure_data(state / "data", "math", task["train_problems"], task["eval_problems"])
    return str(train), str(heldout)


def train(method: dict, seed: int, cell: Path, model: str, train_file: str, settings: dict) -> None:
    t = settings["training"]
    overrides = [
        "preset=small_cpu", "engines.placement=local", "workflow.domain=math", f"students.path={model}",
        f"data.train_files=['{train_file}']", f"workflow.horizon={settings['workflow']['horizon']}",
        f"data.max_response_length={settings['workflow']['max_new_tokens']}",
        f"data.train_batch_size={t['batch']}", f"actor_rollout_ref.actor.ppo_mini_batch_size={t['batch']}",
        f"rollout.group_size={t['group_size']}", f"actor_rollout_ref.actor.optim.lr={t['lr']}",
        f"actor_rollout_ref.model.lora_rank={t['lora_rank']}", f"actor_rollout_ref.model.lora_alpha={t['lora_alpha']}",
        f"trainer.total_training_steps={t['steps']}", f"trainer.seed={seed}", "trainer.save_freq=-1",
        f"trainer.default_local_dir={cell / 'checkpoints'}", f"hydra.run.dir={cell / 'hydra'}",
        *method["overrides"],
    ]  # fmt: skip
    run([sys.executable, "-m", "verl_masopd.train", *overrides], cell / "train.log", environment())


def evaluate(models: list[str], seed: int, cell: Path, heldout: str, settings: dict) -> dict:
    w = settings["workflow"]
    command = [
        sys.executable, "-m", "verl_masopd.eval", "--data", heldout, *models, "--workflow", "mas",
        "--horizon", str(w["horizon"]), "--max-new-tokens", str(w["max_new_tokens"]), "--k", str(w["eval_k"]),
        "--batch-size", str(w["eval_batch"]), "--seed", str(seed), "--out", str(cell / "eval"),
    ]  # fmt: skip
    run(command, cell / "eval.log", environment())
    with open(cell / "eval" / "summary.csv") as f:
        summary = next(csv.DictReader(f))
    return {key: float(summary[key]) for key in (*MEASURES, "episodes")}


def environment() -> dict:
    return {**os.environ, "VERL_PLATFORM": "cpu", "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}


ARCHIVED = (DONE, "eval/summary.csv", "eval/summary.md", "eval/records.jsonl")


def archive_cell(cell: Path, target: Path) -> None:
    """The finished cell's result and evaluation, without checkpoints; done.json written last."""
    for name in (*ARCHIVED[1:], DONE):
        if (cell / name).exists():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cell / name, target / name)


def cell_result(
    name: str, seed: int, state: Path, model: str, files: tuple[str, str], settings: dict, archive: Path | None
) -> dict:
    cell = state / "cells" / name / f"seed{seed}"
    kept = archive / name / f"seed{seed}" if archive else None
    if kept and (kept / DONE).exists():
        return json.loads((kept / DONE).read_text())
    if (cell / DONE).exists():
        if kept:
            archive_cell(cell, kept)
        return json.loads((cell / DONE).read_text())
    shutil.rmtree(cell, ignore_errors=True)
    cell.mkdir(parents=True)
    started = time.time()
    method = settings["methods"][name]
    if method["train"]:
        train(method, seed, cell, model, files[0], settings)
        models = ["--checkpoint", str(cell / "checkpoints")]
    else:
        models = ["--model", model]
    trained = time.time()
    result = {
        "method": name,
        "seed": seed,
        **evaluate(models, seed, cell, files[1], settings),
        "train_seconds": round(trained - started, 1),
        "eval_seconds": round(time.time() - trained, 1),
    }
    (cell / DONE).write_text(json.dumps(result, indent=2) + "\n")
    if kept:
        archive_cell(cell, kept)
    return result


def report(cells: list[dict]) -> dict:
    """Means over seeds per method and measure, and each method minus prompt_only paired by seed."""
    by_method: dict[str, dict[int, dict]] = {}
    for cell in cells:
        by_method.setdefault(cell["method"], {})[cell["seed"]] = cell
    methods = {}
    for name, seeds in by_method.items():
        methods[name] = {"seeds": sorted(seeds)}
        for measure in MEASURES:
            values = {seed: cell[measure] for seed, cell in seeds.items()}
            entry = {"mean": statistics.fmean(values.values())}
            if name != BASELINE and BASELINE in by_method:
                base = {seed: cell[measure] for seed, cell in by_method[BASELINE].items()}
                paired = paired_difference(values, base)
                entry["minus_prompt_only"] = paired.as_dict() if paired else None
            methods[name][measure] = entry
    return {"cells": cells, "methods": methods}


def markdown(numbers: dict) -> str:
    header = ["method", "seeds", *MEASURES, "accuracy minus prompt_only (paired, 95% CI)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, m in numbers["methods"].items():
        diff = m["accuracy"].get("minus_prompt_only")
        shown = f"{diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]" if diff else "—"
        cells = [name, ",".join(map(str, m["seeds"])), *(f"{m[k]['mean']:.3f}" for k in MEASURES), shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = json.loads(Path(args.settings).read_text())
    state = Path(args.state)
    model = args.model or fetch_model(state)
    files = problems(state, settings["task"])
    methods = args.methods.split(",") if args.methods else list(settings["methods"])
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else settings["seeds"]
    unknown = [m for m in methods if m not in settings["methods"]]
    if unknown:
        raise SystemExit(f"real_model_learning: --methods: {unknown[0]} is not a method of {args.settings}")
    archive = Path(args.archive) if args.archive else None
    cells = []
    for seed in seeds:  # seed-major: every method has a result at the first seed before any has two
        for name in methods:
            cells.append(cell_result(name, seed, state, model, files, settings, archive))
            print(json.dumps(cells[-1]), flush=True)
    numbers = report(cells)
    table = markdown(numbers)
    (state / "report.json").write_text(json.dumps(numbers, indent=2) + "\n")
    (state / "report.md").write_text(table)
    print(table)
    if args.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "results.json").write_text(json.dumps({"settings": settings, **numbers}, indent=2) + "\n")
        (RESULTS / "results.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
