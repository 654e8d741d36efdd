"""The paper's comparison in miniature on the tiny world: every method × seed per domain, the same
budget, evaluated on held-out problems, then the report.

    python benchmarks/tiny_world_compare.py [--domains code,math] [--methods masopd,opd,...]
        [--seeds 0,1,2,3,4] [--steps 12] [--test-freq 2] [--eval-k 2] [--eval-limit 200] [--jobs 2]
        [--eval-from N] [--settings SUMMARY.json] [--runs DIR] [--save [NAME]]

The world is whatever `recipes/tiny_world.py` exports (STUDENT_MODEL, TEACHER_MODEL, TRAIN_FILES,
VAL_FILES) for --cache; each method trains through its recipe in CPU mode (MASOPD_CPU=1, the
recipe's own overrides) with the same steps, batch and group size (the tiny_world preset's, plus
--override), validation on the first --curve-limit problems of VAL_FILES every --test-freq steps for
the training curves, then is evaluated on the first --eval-limit problems of VAL_FILES (with
--eval-from N, on the --eval-limit held-out problems from HELDOUT_START + N instead, a range no
earlier run has to have seen) with --eval-k samples per problem (evaluation sampling, the preset's
horizon and response length), with the teacher's role advantage Δ and once more with the roles'
models swapped (MAS workflows). The prompt-only MAS evaluates the untrained student. --settings
reads the settings each method was chosen at on validation problems (tiny_world_sensitivity.py's
summary.json, "chosen") and trains every method with them (a method without a choice stops the
script). The defaults are the comparison docs/results.md reports. --jobs runs that many method × seed
cells at once, each with its share of the CPU threads.

Layout written (the report's, verl_masopd/report/__init__.py):
    RUNS/<method>/seed<k>/train/<domain>/          checkpoints/, TensorBoard, train.log, done.json
    RUNS/<method>/seed<k>/eval[-swap]/<domain>-heldout/   records, summary, settings, done.json
    RUNS/report/                                   report.md, report.json, PNG figures
    RUNS/compare.json                              the runs' wall-clock seconds and outcomes
    RUNS/failed/<method>/seed<k>/<domain>/<step>/  the logs of a run or evaluation that failed

Cells run seed by seed (every method of a seed before the next seed), so a comparison stopped
part-way leaves whole seeds to pair. Resumable: a run or evaluation with done.json is skipped; one
without it (killed part-way) is deleted and redone. Across sessions (a new checkout has no RUNS):
--archive DIR packs each finished cell there without its checkpoints and restores the cells RUNS
lacks before running (run_archive.py; benchmarks/results/tiny_world_compare_runs/ is the committed
one). A failed one is recorded (its logs kept under RUNS/failed/) and the others go on; its cells
are missing from the report, and the script exits with 1.
--save also writes RUNS/compare.json to benchmarks/results/NAME.json and copies the report
(Markdown, JSON, PNG) to benchmarks/results/NAME/ (NAME: tiny_world_compare unless given).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import run_archive
from results_file import RESULTS, save_result

from data_prep.writer import write_rows
from verl_masopd.config import compose_config
from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES
from verl_masopd.report.__main__ import write_report
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.tiny_world.world import task_rows

ROOT = Path(__file__).resolve().parents[1]
DONE = "done.json"
WORLD_VARIABLES = ("STUDENT_MODEL", "TEACHER_MODEL", "TRAIN_FILES", "VAL_FILES")


@dataclass(frozen=True)
class Method:
    """`recipe` under recipes/ ("{domain}" filled in; None: no training), its extra overrides, the
    evaluation workflow and the domains it applies to."""

    recipe: str | None
    overrides: tuple[str, ...] = ()
    workflow: str = "mas"
    domains: tuple[str, ...] = ("code", "math")


METHODS = {
    "mas-prompt": Method(None),
    "sa-st-grpo": Method("baselines/sa_st_grpo.sh", workflow="sa"),
    "mas-grpo": Method("baselines/grpo.sh"),
    "magrpo": Method("baselines/magrpo.sh"),
    "marft": Method("baselines/marft.sh"),
    "at-grpo": Method("baselines/at_grpo.sh"),
    "cure": Method("baselines/cure.sh", domains=("code",)),
    "opd": Method("baselines/opd.sh"),
    "masopd": Method("masopd_{domain}.sh"),
    "masopd-no-ras": Method("masopd_{domain}.sh", ("algorithm.masopd.ras_coef=0",)),
    "masopd-no-pac": Method("masopd_{domain}.sh", ("pac.enable=false",)),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=str(ROOT / ".cache" / "compare" / "runs"), help="output folder RUNS")
    p.add_argument("--cache", default=str(ROOT / ".cache" / "compare" / "world"), help="tiny_world.py --cache")
    p.add_argument("--domains", default="code,math")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--steps", type=int, default=12, help="training steps of every method")
    p.add_argument("--test-freq", type=int, default=2, help="validation every N steps (training curves)")
    p.add_argument("--curve-limit", type=int, default=100, help="validate on the first N held-out problems")
    p.add_argument("--eval-k", type=int, default=2, help="evaluation samples per held-out problem")
    p.add_argument("--eval-limit", type=int, default=200, help="evaluate the first N held-out problems (0: all)")
    p.add_argument("--eval-from", type=int, help="evaluate held-out problems from HELDOUT_START + N instead")
    p.add_argument("--jobs", type=int, default=1, help="method × seed cells run at once")
    p.add_argument("--no-teacher", action="store_true", help="skip the teacher's role advantage Δ")
    p.add_argument("--no-swap", action="store_true", help="skip the swapped-seat evaluation")
    p.add_argument("--override", action="append", default=[], help="Hydra override for every training run")
    p.add_argument("--settings", help="summary.json of tiny_world_sensitivity.py: each method's chosen overrides")
    p.add_argument(
        "--save", nargs="?", const="tiny_world_compare", help="also write benchmarks/results/NAME.json and NAME/"
    )
    p.add_argument("--archive", default="", help="keep finished cells here across sessions (run_archive.py)")
    return p


def world(cache: str, domain: str) -> dict[str, str]:
    """The variables `recipes/tiny_world.py` exports for `domain` (built into `cache` once)."""
    env = {k: v for k, v in os.environ.items() if k not in (*WORLD_VARIABLES, "MASOPD_PROMPT_STYLE")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "tiny_world.py"), "--cache", cache, "--domain", domain],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    exports = {}
    for line in out.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            exports[name] = value
    missing = [v for v in WORLD_VARIABLES if v not in exports]
    if missing:
        raise SystemExit(f"recipes/tiny_world.py exported no {missing}")
    return exports


def run_env(exports: dict[str, str], jobs: int, **extra: str) -> dict[str, str]:
    """The environment of a run: the world's exports, CPU mode, and with several --jobs each run's
    share of the cores as its torch threads."""
    dropped = {"TENSORBOARD_DIR", *RENDEZVOUS_VARIABLES}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(VERL_PLATFORM="cpu", RAY_AUTH_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    if jobs > 1:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    return {**env, **exports, **extra}


def once(folder: Path, failed: Path, work, *args) -> dict:
    """Runs `work(*args, folder)` unless folder/done.json exists (a folder without it is cleared
    first); returns {"seconds", "ok", "skipped"}. On success writes done.json; on failure moves
    the folder's logs to `failed` and removes the folder, so that the report never reads it."""
    if (folder / DONE).is_file():
        return {**json.loads((folder / DONE).read_text()), "skipped": True}
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    ok = work(*args, folder)
    outcome = {"seconds": round(time.perf_counter() - start, 1), "ok": ok}
    if ok:
        (folder / DONE).write_text(json.dumps(outcome) + "\n")
    else:
        shutil.rmtree(failed, ignore_errors=True)
        failed.mkdir(parents=True)
        for log in folder.glob("*.log"):
            shutil.copy(log, failed / log.name)
        shutil.rmtree(folder)
    return {**outcome, "skipped": False}


def train(method: Method, domain: str, seed: int, args, settings: dict, folder: Path) -> bool:
    recipe = ROOT / "recipes" / method.recipe.format(domain=domain)
    overrides = [
        *method.overrides,
        f"trainer.total_training_steps={args.steps}",
        f"trainer.seed={seed}",
        "trainer.save_freq=-1",
        f"trainer.test_freq={args.test_freq}",
        "trainer.val_before_train=true",
        f"trainer.default_local_dir={folder / 'checkpoints'}",
        f"hydra.run.dir={folder / 'hydra'}",
        *args.override,
    ]
    env = run_env(settings["exports"], args.jobs, MASOPD_CPU="1", MASOPD_CACHE=args.cache, DOMAIN=domain)
    env.update(PYTHON=sys.executable, VAL_FILES=settings["curve_files"])
    with open(folder / "train.log", "w") as log:
        done = subprocess.run(["bash", str(recipe), *overrides], env=env, cwd=ROOT, stdout=log, stderr=log)
    return done.returncode == 0


def trained_models(folder: Path) -> list[str]:
    """--model / --role-model arguments for the policies of the last checkpoint in `folder`."""
    checkpoints = folder / "checkpoints"
    step = (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip()
    policies = sorted((checkpoints / f"global_step_{step}").glob("policy_*"))
    paths = {p.name.removeprefix("policy_"): str(p / "huggingface") for p in policies}
    first = next(iter(paths.values()))
    if len(paths) == 1:
        return ["--model", first]
    return ["--model", first, *(f for role, path in paths.items() for f in ("--role-model", f"{role}={path}"))]


def evaluate(models: list[str], workflow: str, seed: int, args, settings: dict, extra: list[str], folder: Path):
    """python -m verl_masopd.eval of `models` on the held-out problems into `folder`; True on success."""
    horizon = 1 if workflow == "sa" else settings["horizon"]
    command = [
        sys.executable, "-m", "verl_masopd.eval", "--data", settings["val_files"], *models,
        "--workflow", workflow, "--horizon", str(horizon), "--k", str(args.eval_k),
        "--max-new-tokens", str(settings["max_new_tokens"]), "--seed", str(seed), "--out", str(folder), *extra,
        "--prompt-style", settings["prompt_style"],
    ]  # fmt: skip
    if args.eval_limit:
        command += ["--limit", str(args.eval_limit)]
    with open(folder / "eval.log", "w") as log:
        return subprocess.run(command, env=settings["env"], cwd=ROOT, stdout=log, stderr=log).returncode == 0


def first_problems(path: str, limit: int, out: Path) -> str:
    """`out`: the first `limit` rows of the parquet file `path` (all of them for 0)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.read_parquet(path)
    (frame.head(limit) if limit else frame).to_parquet(out, index=False)
    return str(out)


def problems_from(domain: str, start: int, count: int, out: Path) -> str:
    """`out`: held-out problems [HELDOUT_START + start, HELDOUT_START + start + count) of `domain`."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write_rows(task_rows(domain, HELDOUT_START + start, count, "test"), out)
    return str(out)


def domain_settings(args, domain: str, runs: Path) -> dict:
    """The world's exports and the evaluation settings of `domain` (the tiny_world preset's horizon,
    response length and teacher context budget, after --override), and the training curves'
    validation file (RUNS/curve-data/)."""
    exports = world(args.cache, domain)
    prompt_style = exports.get("MASOPD_PROMPT_STYLE", "paper")
    preset = compose_config(
        ["preset=tiny_world", f"workflow.domain={domain}", f"workflow.prompt_style={prompt_style}", *args.override]
    )
    val_file = exports["VAL_FILES"].split(",")[0]
    if args.eval_from is not None:
        val_file = problems_from(
            domain, args.eval_from, args.eval_limit, runs / "eval-data" / f"{domain}-from{args.eval_from}.parquet"
        )
    curve_file = runs / "curve-data" / f"{domain}-first{args.curve_limit}.parquet"
    return {
        "exports": exports,
        "prompt_style": prompt_style,
        "val_files": val_file,
        "curve_files": first_problems(val_file, args.curve_limit, curve_file),
        "horizon": preset.workflow.horizon,
        "max_new_tokens": preset.data.max_response_length,
        "teacher_max_context": preset.teacher.max_context_length,
        "env": run_env(exports, args.jobs),
    }


def run_method(name: str, method: Method, domain: str, seed: int, args, settings: dict, runs: Path) -> dict[str, dict]:
    """Train (unless prompt-only) and evaluate one method × seed on `domain`; {step key: outcome}."""
    exports, outcomes, folders = settings["exports"], {}, []
    base, key = runs / name / f"seed{seed}", f"{name}/seed{seed}/{domain}"
    models = ["--model", exports["STUDENT_MODEL"]]
    if method.recipe is not None:
        folder = base / "train" / domain
        folders.append(folder)
        outcomes[f"{key}/train"] = once(
            folder, runs / "failed" / key / "train", train, method, domain, seed, args, settings
        )
        report_progress(f"{key}/train", outcomes[f"{key}/train"])
        if not outcomes[f"{key}/train"]["ok"]:
            return outcomes
        # read when an evaluation still has to run (an archived cell keeps no checkpoints)
        models = None
    mas = method.workflow == "mas"
    teacher = ["--teacher", exports["TEACHER_MODEL"], "--teacher-max-context", str(settings["teacher_max_context"])]
    evals = {"eval": teacher if mas and not args.no_teacher else []}
    if mas and not args.no_swap:
        evals["eval-swap"] = ["--swap-roles"]
    for kind, extra in evals.items():
        folder, failed = base / kind / f"{domain}-heldout", runs / "failed" / key / kind
        folders.append(folder)
        if models is None and not (folder / DONE).is_file():
            models = trained_models(folders[0])
        outcomes[f"{key}/{kind}"] = once(folder, failed, evaluate, models, method.workflow, seed, args, settings, extra)
        report_progress(f"{key}/{kind}", outcomes[f"{key}/{kind}"])
    target = run_archive.archive_path(Path(args.archive), name, seed, domain) if args.archive else None
    if target is not None and all(o["ok"] for o in outcomes.values()) and not target.is_file():
        run_archive.pack(runs, folders, target)
    return outcomes


def chosen_methods(path: str, names: list[str]) -> dict[str, Method]:
    """METHODS with each trained method's overrides followed by its chosen ones from `path`."""
    chosen = json.loads(Path(path).read_text())["chosen"]
    methods = dict(METHODS)
    for name in names:
        if METHODS[name].recipe is None:
            continue
        overrides = (chosen.get(name) or {}).get("overrides")
        if overrides is None:
            raise SystemExit(f"--settings {path}: no chosen setting for {name}")
        methods[name] = dataclasses.replace(METHODS[name], overrides=(*METHODS[name].overrides, *overrides))
    return methods


def compare(args) -> dict:
    runs = Path(args.runs).resolve()
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; choose from {list(METHODS)}")
    table = chosen_methods(args.settings, methods) if args.settings else METHODS
    seeds = [int(s) for s in args.seeds.split(",") if s]
    domains = [d for d in args.domains.split(",") if d]
    settings = {domain: domain_settings(args, domain, runs) for domain in domains}
    if args.archive:
        print(f"{run_archive.unpack_missing(Path(args.archive), runs)} archived cells restored", flush=True)
    cells = [(n, d, s) for d in domains for s in seeds for n in methods if d in METHODS[n].domains]
    outcomes = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda c: run_method(c[0], table[c[0]], c[1], c[2], args, settings[c[1]], runs), cells)
        for cell_outcomes in done:
            outcomes.update(cell_outcomes)
    evaluated = [m for m in methods if any((runs / m).glob(f"seed*/eval/*/{DONE}"))]
    try:
        report = write_report(runs, runs / "report", evaluated, "val/accuracy", False)
    except ValueError as e:
        raise SystemExit(f"report: {e}") from None
    return {
        "settings": {k: v for k, v in vars(args).items() if k != "save"},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "runs": outcomes,
        "failed": sorted(k for k, v in outcomes.items() if not v["ok"]),
        "main_table": report["main_table"],
    }


def report_progress(key: str, outcome: dict) -> None:
    state = "skipped (done)" if outcome["skipped"] else ("done" if outcome["ok"] else "FAILED")
    print(f"{key}: {state} in {outcome['seconds']} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = compare(args)
    runs = Path(args.runs)
    (runs / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.save:
        save_result(args.save, result, echo=False)
        shutil.copytree(runs / "report", RESULTS / args.save, dirs_exist_ok=True)
    print((runs / "report" / "report.md").read_text())
    if result["failed"]:
        print(f"failed: {result['failed']} (logs under {runs})", file=sys.stderr)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
