"""MultiAgent-OPD's comparison in miniature on the tiny search world: every system of the search
recipes × seed, the same budget, evaluated with 4 attempts per held-out question, then the report.

    python benchmarks/search_world_compare.py [--systems multiagent-opd,...] [--seeds 0,1,2]
        [--steps 12] [--test-freq 4] [--eval-k 4] [--eval-limit 100] [--jobs 1] [--runs DIR]
        [--student DIR] [--teacher DIR] [--archive DIR] [--save [NAME]]

Systems (fixed before the comparison was run; the recipes' CPU mode, MASOPD_CPU=1, on the world
`recipes/tiny_world.py --domain qa` exports, its budgets `preset=tiny_search`):

    multiagent-opd      recipes/multiagent_opd.sh: Searchers by OPD from the shipped teacher, Leader
                        and Answerer by GRPO (the reference of every difference)
    prompted-critic     recipes/search/prompted_critic.sh: Searchers by GRPO on the teacher-judge's score
    searcher-grpo       recipes/search/searcher_grpo.sh: Searchers by GRPO on the team's EM
    base-teacher        recipes/search/base_teacher.sh: the untrained student as the Searchers' teacher
    searchers-no-loss   recipes/search/searchers_no_loss.sh: Searchers untrained
    multiagent-opd-role-policies  multiagent-opd with one policy per role (workflow.policy_sharing=role):
                        whether sharing the policy moves the Answerer when the Searchers are distilled
                        (added after the first comparison, see search_untagged.py)
    cmas-rl             recipes/search/teacher.sh: the cascaded system (one Searcher, the Answerers)
                        trained by GRPO on EM from the student
    hmas-base           the untrained student in the hierarchical team (prompt only)
    cmas-base           the untrained student in the cascaded system (prompt only)

--student and --teacher put other models of the search world's tokenizer in place of the shipped
ones (a `tiny_world build --out` variant, a teacher trained further by recipes/search/teacher.sh):
every system, the prompt-only ones included, then starts from that student, and every system that
distils from the teacher distils from that one.

Each trained system runs --steps steps from the student (the tiny_world preset's batch,
group size and learning rate), validated on the first --curve-limit held-out questions every
--test-freq steps for the curves, and is evaluated from its last checkpoint (`--checkpoint`: the
run's own workflow and budgets) on the first --eval-limit held-out questions with --eval-k
attempts each (evaluation sampling). The prompt-only systems evaluate the student with the same
budgets. The world's held-out questions are never trained on.

Cells run seed by seed (every system of a seed before the next seed), so a comparison stopped
part-way leaves whole seeds to pair.

Summary (RUNS/summary.json, summary.md; with --save [NAME] also benchmarks/results/NAME/, by default
search_world_compare/):
per system, avg@k, pass@k and k/k (macro over the one- and two-hop questions, eval/qa_attempts.py)
as mean ± std over seeds, failures, tokens; and multiagent-opd minus each other system with its
95% paired bootstrap interval (report/qa_bootstrap.py), the unit a (seed, question) pair: seed s of
one system is paired with seed s of the other on the same question, its k attempts kept
together; and the same differences paired by seed alone (each seed's macro value, report/paired.py:
mean ± standard error, 95% t-interval). The report tool's tables and figures (per seed) go to
RUNS/report/.

Resumable as tiny_world_compare.py (done.json per run and evaluation; --archive keeps finished
cells across sessions, benchmarks/results/search_world_compare_runs/ the committed one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import run_archive
import tiny_world_compare as compare
from results_file import RESULTS

from verl_masopd.config import compose_config
from verl_masopd.eval.qa_attempts import QA_ATTEMPTS_FILE, read_attempts
from verl_masopd.report.__main__ import write_report
from verl_masopd.report.paired import paired_difference
from verl_masopd.report.qa_bootstrap import paired_differences
from verl_masopd.report.qa_scores import PER_QUESTION, system_scores
from verl_masopd.tiny_world.search_demos import OPTIONS
from verl_masopd.workflows.search import CASCADED, HIERARCHICAL

ROOT = compare.ROOT
DOMAIN = "qa"
REFERENCE = "multiagent-opd"
SUMMARY_METRICS = (*PER_QUESTION, "relaxed_em", "failure_rate", "tokens_generated", "tokens_read")


@dataclass(frozen=True)
class System:
    """`recipe` under recipes/ (None: the untrained student, prompt only), the system it plays and
    the recipe's extra overrides."""

    recipe: str | None
    system: str = HIERARCHICAL
    overrides: tuple[str, ...] = ()


SYSTEMS = {
    REFERENCE: System("multiagent_opd.sh"),
    "prompted-critic": System("search/prompted_critic.sh"),
    "searcher-grpo": System("search/searcher_grpo.sh"),
    "base-teacher": System("search/base_teacher.sh"),
    "searchers-no-loss": System("search/searchers_no_loss.sh"),
    "multiagent-opd-role-policies": System("multiagent_opd.sh", overrides=("workflow.policy_sharing=role",)),
    "cmas-rl": System("search/teacher.sh", CASCADED),
    "hmas-base": System(None),
    "cmas-base": System(None, CASCADED),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=str(ROOT / ".cache" / "search_compare" / "runs"), help="output folder RUNS")
    p.add_argument("--cache", default=str(ROOT / ".cache" / "search_compare" / "world"), help="tiny_world.py --cache")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=12, help="training steps of every trained system")
    p.add_argument("--test-freq", type=int, default=4, help="validation every N steps (training curves)")
    p.add_argument("--curve-limit", type=int, default=50, help="validate on the first N held-out questions")
    p.add_argument("--eval-k", type=int, default=4, help="attempts per held-out question")
    p.add_argument("--eval-limit", type=int, default=100, help="evaluate the first N held-out questions")
    p.add_argument("--jobs", type=int, default=1, help="system × seed cells run at once")
    p.add_argument("--override", action="append", default=[], help="Hydra override for every training run")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--archive", default="", help="keep finished cells here across sessions (run_archive.py)")
    p.add_argument("--student", default="", help="student model folder in place of the shipped one")
    p.add_argument("--teacher", default="", help="teacher model folder in place of the shipped one")
    p.add_argument(
        "--save", nargs="?", const="search_world_compare", default="", help="also write benchmarks/results/NAME/"
    )
    return p


def settings_of(args, runs: Path) -> dict:
    """The world's exports (with --student / --teacher in place of the shipped models), the held-out
    and curve files, the preset's horizon and reply length."""
    models = {"STUDENT_MODEL": ("--student", args.student), "TEACHER_MODEL": ("--teacher", args.teacher)}
    for option, folder in models.values():
        if folder and not Path(folder).is_dir():
            raise SystemExit(f"{option}: {folder} is not a folder")
    exports = compare.world(args.cache, DOMAIN)
    exports |= {name: str(Path(folder).resolve()) for name, (_, folder) in models.items() if folder}
    preset = compose_config(["preset=tiny_search", f"workflow.domain={DOMAIN}", "workflow.name=search", *args.override])
    heldout = exports["VAL_FILES"]
    first = {
        n: compare.first_problems(heldout, n, runs / "data" / f"heldout-first{n}.parquet")
        for n in (args.eval_limit, args.curve_limit)
    }
    return {
        "exports": exports,
        "eval_files": first[args.eval_limit],
        "curve_files": first[args.curve_limit],
        "horizon": {HIERARCHICAL: preset.workflow.horizon, CASCADED: 2},
        "max_new_tokens": preset.data.max_response_length,
        "env": compare.run_env(exports, args.jobs),
    }


def train(system: System, seed: int, args, settings: dict, folder: Path) -> bool:
    """The system's recipe in CPU mode for --steps steps (the cells' one training run)."""
    return compare.train(compare.Method(system.recipe, system.overrides), DOMAIN, seed, args, settings, folder)


def evaluate(name: str, seed: int, args, settings: dict, train_folder: Path | None, folder: Path) -> bool:
    """python -m verl_masopd.eval with --eval-k attempts per question into `folder`."""
    system = SYSTEMS[name]
    if train_folder is not None:
        models = ["--checkpoint", str(train_folder / "checkpoints")]
    else:
        options = {**OPTIONS, "system": system.system, "retriever": settings["exports"]["RETRIEVER"]}
        options.pop("prompt_style")
        models = ["--model", settings["exports"]["STUDENT_MODEL"], "--workflow", "search", "--policy-sharing", "shared",
                  "--horizon", str(settings["horizon"][system.system]), "--prompt-style", "compact",
                  "--max-new-tokens", str(settings["max_new_tokens"]),
                  *(f for k, v in options.items() for f in ("--workflow-option", f"{k}={v}"))]  # fmt: skip
    command = [sys.executable, "-m", "verl_masopd.eval", "--data", settings["eval_files"], *models,
               "--k", str(args.eval_k), "--seed", str(seed), "--out", str(folder)]  # fmt: skip
    with open(folder / "eval.log", "w") as log:
        return subprocess.run(command, env=settings["env"], cwd=ROOT, stdout=log, stderr=log).returncode == 0


def run_cell(name: str, seed: int, args, settings: dict, runs: Path) -> dict[str, dict]:
    """Train (unless prompt-only) and evaluate one system × seed; {step key: outcome}."""
    system, base, key = SYSTEMS[name], runs / name / f"seed{seed}", f"{name}/seed{seed}/{DOMAIN}"
    outcomes, folders, train_folder = {}, [], None
    if system.recipe is not None:
        train_folder = base / "train" / DOMAIN
        folders.append(train_folder)
        outcomes[f"{key}/train"] = compare.once(
            train_folder, runs / "failed" / key / "train", train, system, seed, args, settings
        )
        compare.report_progress(f"{key}/train", outcomes[f"{key}/train"])
        if not outcomes[f"{key}/train"]["ok"]:
            return outcomes
    folder = base / "eval" / f"{DOMAIN}-heldout"
    folders.append(folder)
    outcomes[f"{key}/eval"] = compare.once(
        folder, runs / "failed" / key / "eval", evaluate, name, seed, args, settings, train_folder
    )
    compare.report_progress(f"{key}/eval", outcomes[f"{key}/eval"])
    target = run_archive.archive_path(Path(args.archive), name, seed, DOMAIN) if args.archive else None
    if target is not None and all(o["ok"] for o in outcomes.values()) and not target.is_file():
        run_archive.pack(runs, folders, target)
    return outcomes


def seed_attempts(runs: Path, name: str, seeds: list[int]) -> dict[int, list]:
    """{seed: the attempts of its evaluation} for the seeds evaluated."""
    out = {}
    for seed in seeds:
        path = runs / name / f"seed{seed}" / "eval" / f"{DOMAIN}-heldout" / QA_ATTEMPTS_FILE
        if path.is_file():
            out[seed] = read_attempts(path)
    return out


def pooled(attempts: dict[int, list]) -> list:
    """The seeds' attempts as one system whose questions are (seed, question) pairs."""
    return [replace(a, question=f"seed{seed}:{a.question}") for seed, items in attempts.items() for a in items]


def summarize(runs: Path, names: list[str], seeds: list[int], resamples: int) -> dict:
    """Per system mean ± std over seeds of the macro metrics; the reference minus each other system."""
    attempts = {name: seed_attempts(runs, name, seeds) for name in names}
    macro = {name: {s: system_scores(x).macro for s, x in by_seed.items()} for name, by_seed in attempts.items()}
    systems = {}
    for name, by_seed in attempts.items():
        if not by_seed:
            continue
        macros = list(macro[name].values())
        systems[name] = {
            "seeds": sorted(by_seed),
            **{
                m: {
                    "mean": statistics.mean(x[m] for x in macros),
                    "std": statistics.stdev(x[m] for x in macros) if len(macros) > 1 else 0.0,
                }
                for m in SUMMARY_METRICS
            },
        }
    differences = {}
    if REFERENCE in systems:
        for name in systems:
            common = sorted(set(attempts[REFERENCE]) & set(attempts[name]))
            if name == REFERENCE or not common:
                continue
            a, b = (pooled({s: attempts[n][s] for s in common}) for n in (REFERENCE, name))
            d = paired_differences(a, b, (REFERENCE, name), resamples=resamples)
            differences[name] = {"seeds": common, **{m: x.as_dict() for m, x in d.macro.items()}}
            by_seed = {}
            for m in PER_QUESTION:
                t = paired_difference(*({s: x[m] for s, x in macro[n].items()} for n in (REFERENCE, name)))
                if t is not None:
                    by_seed[m] = t.as_dict()
            differences[name]["paired_by_seed"] = by_seed
    return {"systems": systems, "differences": differences}


def summary_markdown(summary: dict, k: int) -> str:
    lines = [
        f"Held-out questions, {k} attempts each; macro over one- and two-hop questions; mean ± std over seeds (%):",
        "",
        f"| system | seeds | avg@{k} | pass@{k} | {k}/{k} | relaxed EM | failures | tokens generated | tokens read |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary["systems"].items():
        pct = [
            f"{100 * s[m]['mean']:.1f} ± {100 * s[m]['std']:.1f}" for m in (*PER_QUESTION, "relaxed_em", "failure_rate")
        ]
        tokens = [f"{s[m]['mean']:.0f}" for m in ("tokens_generated", "tokens_read")]
        lines.append(f"| {name} | {len(s['seeds'])} | " + " | ".join(pct + tokens) + " |")
    lines += [
        "",
        f"{REFERENCE} minus each system, points, with the 95% paired bootstrap interval ((seed, question) units):",
        "",
    ]
    lines += [f"| system | avg@{k} | pass@{k} | {k}/{k} |", "|---|---|---|---|"]
    for name, d in summary["differences"].items():
        cells = [
            f"{100 * d[m]['difference']:+.1f} [{100 * d[m]['low']:+.1f}, {100 * d[m]['high']:+.1f}]"
            for m in PER_QUESTION
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{REFERENCE} minus each system, points, paired by seed (the seeds' macro values): mean ± standard"
        " error [95% t-interval]:",
        "",
        f"| system | avg@{k} | pass@{k} | {k}/{k} |",
        "|---|---|---|---|",
    ]
    for name, d in summary["differences"].items():
        cells = []
        for m in PER_QUESTION:
            t = d["paired_by_seed"].get(m)
            cells.append(
                f"{100 * t['mean']:+.1f} ± {100 * t['se']:.1f} [{100 * t['low']:+.1f}, {100 * t['high']:+.1f}]"
                if t
                else "—"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _interval(x: dict) -> str:
    return f"{100 * x['difference']:+.1f} [{100 * x['low']:+.1f}, {100 * x['high']:+.1f}]"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs = Path(args.runs).resolve()
    names = [n for n in args.systems.split(",") if n]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; choose from {list(SYSTEMS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    settings = settings_of(args, runs)
    if args.archive:
        print(f"{run_archive.unpack_missing(Path(args.archive), runs)} archived cells restored", flush=True)
    outcomes = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for cell in pool.map(
            lambda c: run_cell(c[0], c[1], args, settings, runs), [(n, s) for s in seeds for n in names]
        ):
            outcomes.update(cell)
    summary = summarize(runs, names, seeds, args.resamples)
    evaluated = [n for n in names if n in summary["systems"]]
    write_report(runs, runs / "report", evaluated, "val/accuracy", False)
    result = {
        "settings": {k: v for k, v in vars(args).items() if k != "save"},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "runs": outcomes,
        "failed": sorted(k for k, v in outcomes.items() if not v["ok"]),
        **summary,
    }
    (runs / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    (runs / "summary.md").write_text(summary_markdown(summary, args.eval_k))
    if args.save:
        target = RESULTS / args.save
        shutil.copytree(runs / "report", target / "report", dirs_exist_ok=True)
        shutil.copy(runs / "summary.json", target / "summary.json")
        shutil.copy(runs / "summary.md", target / "summary.md")
    print((runs / "summary.md").read_text())
    if result["failed"]:
        print(f"failed: {result['failed']} (logs under {runs})", file=sys.stderr)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
