"""The distillation options measured on the tiny world, at the comparison's budget: masopd under
each loss mode, GRPO + OPD against GRPO and OPD alone, two teachers against the better one alone.

    python benchmarks/tiny_world_distillation.py [--domains math,code] [--seeds 0,1,2] [--jobs 2]
        [--max-cells N] [--summary] [--steps 12] [--eval-k 2] [--eval-limit 200] [--runs DIR] [--results DIR]

Every cell is trained and evaluated as a cell of tiny_world_sensitivity.py (validation and test
accuracy, seconds, the training diagnostics), each method at the setting the sensitivity study
chose for it (its summary.json), plus the option's overrides:

  masopd   k1              the default (the sampled-token advantage)
           k3              low_var_kl as the token advantage
           forward_kl_topk verl's top-k forward KL, k = 8, supervised, in the engine's loss
           jsd             the generalised JSD over the top 8, β_J = 0.5, supervised
           two_teachers    distillation.teacher_models: the shipped teacher and the untrained
                           student as a weaker one, confidence weights (τ = 1)
  opd      k1              OPD alone
  mas-grpo none            GRPO alone
           plus_opd        GRPO + OPD: use_task_rewards, λ = 1, k1, with the shipped teacher

Resumable as the sensitivity study: a cell's result is RESULTS/cells/<domain>/<method>/<option>/
seed<k>.json (RESULTS: benchmarks/results/tiny_world_distillation/), and a cell with one is
skipped (--summary: write the summary of the cells done, run none). RESULTS/summary.json and
summary.md hold the test table (mean ± std over seeds), each option's difference from its
method's default and each row's difference from OPD, paired by seed, with the standard error and
the 95% t-interval (report/paired.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tiny_world_compare as compare
import tiny_world_sensitivity as study
from results_file import RESULTS

from verl_masopd.report.paired import paired_difference

OPTIONS_RESULTS = RESULTS / "tiny_world_distillation"
LOSS = "distillation.distillation_loss"
TOP_K = (f"{LOSS}.topk=8", f"{LOSS}.use_policy_gradient=false")
TWO_TEACHERS = (
    "++distillation.teacher_models={strong:{model_path:${teacher.model_path}},weak:{model_path:${students.path}}}",
    "distillation.teacher_weighting=confidence",
)
OPTIONS = {
    "masopd": {
        "k1": (),
        "k3": (f"{LOSS}.loss_mode=k3",),
        "forward_kl_topk": (f"{LOSS}.loss_mode=forward_kl_topk", *TOP_K),
        "jsd": (f"{LOSS}.loss_mode=jsd", *TOP_K),
        "two_teachers": TWO_TEACHERS,
    },
    "opd": {"k1": ()},
    "mas-grpo": {
        "none": (),
        "plus_opd": (f"{LOSS}.use_task_rewards=true", "teacher.model_path=${oc.env:TEACHER_MODEL}"),
    },
}
DEFAULTS = {"masopd": "k1", "opd": "k1", "mas-grpo": "none"}


def chosen_overrides(summary_path: Path, method: str) -> tuple[str, ...]:
    """The overrides the sensitivity study chose for `method`; stops when it chose none."""
    chosen = json.loads(summary_path.read_text())["chosen"].get(method, {})
    if chosen.get("setting") is None:
        raise SystemExit(f"{summary_path}: the sensitivity study has chosen no setting for {method} yet")
    return tuple(chosen["overrides"])


def cells(summary_path: Path, domains: list[str], seeds: list[int]) -> list[tuple]:
    out = []
    for method, options in OPTIONS.items():
        base = chosen_overrides(summary_path, method)
        for option, overrides in options.items():
            setting = study.Setting(option, (*base, *overrides))
            out += [(domain, method, setting, seed) for domain in domains for seed in seeds]
    return out


REFERENCE = ("opd", "k1")


def summarise(results: list[dict], domains: list[str], seeds: list[int]) -> dict:
    """Test accuracy per method × option × domain; each option minus its method's default and
    every row minus OPD, paired by seed (report/paired.py: mean, standard error, 95% t-interval)."""
    by_key = {(c["domain"], c["method"], c["setting"], c["seed"]): c["test_accuracy"] for c in results}

    def seeds_of(domain: str, method: str, option: str) -> dict[int, float]:
        return {s: by_key[(domain, method, option, s)] for s in seeds if (domain, method, option, s) in by_key}

    table, differences, against = {}, {}, {}
    for method, options in OPTIONS.items():
        for option in options:
            for domain in domains:
                mine = seeds_of(domain, method, option)
                table[f"{method} {option} {domain}"] = list(mine.values())
                if option != DEFAULTS[method]:
                    d = paired_difference(mine, seeds_of(domain, method, DEFAULTS[method]))
                    if d is not None:
                        differences[f"{method} {option} {domain}"] = d.as_dict()
                if (method, option) != REFERENCE:
                    d = paired_difference(mine, seeds_of(domain, *REFERENCE))
                    if d is not None:
                        against[f"{method} {option} {domain}"] = d.as_dict()
    return {
        "domains": domains,
        "seeds": seeds,
        "test": table,
        "differences": differences,
        "against_opd": against,
        "cells": results,
    }


def _difference(d: dict | None) -> str:
    if d is None:
        return "—"
    return f"{100 * d['mean']:+.1f} ± {100 * d['se']:.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def summary_markdown(summary: dict) -> str:
    domains = summary["domains"]
    heads = [*domains, *(f"Δ {d}" for d in domains), *(f"− OPD {d}" for d in domains)]
    lines = [
        f"Test accuracy (%), mean ± std over seeds {summary['seeds']}; Δ: each option minus its method's"
        " default, − OPD: each row minus OPD (`k1`), both paired by seed (mean ± standard error"
        " [95% t-interval]):",
        "",
        "| method | option | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(heads),
    ]
    for method, options in OPTIONS.items():
        for option in options:
            row = []
            for domain in domains:
                v = summary["test"].get(f"{method} {option} {domain}", [])
                std = f" ± {100 * statistics.stdev(v):.1f}" if len(v) > 1 else ""
                row.append(f"{100 * statistics.fmean(v):.1f}{std} (n={len(v)})" if v else "—")
            for key in ("differences", "against_opd"):
                row += [_difference(summary[key].get(f"{method} {option} {domain}")) for domain in domains]
            lines.append(f"| {method} | {option} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=str(compare.ROOT / ".cache" / "distillation" / "runs"), help="run folders")
    p.add_argument("--cache", default=str(compare.ROOT / ".cache" / "compare" / "world"), help="tiny_world.py --cache")
    p.add_argument("--results", default=str(OPTIONS_RESULTS), help="committed results folder RESULTS")
    p.add_argument("--sensitivity", default=str(study.STUDY / "summary.json"), help="the study's summary.json")
    p.add_argument("--domains", default="math,code")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--eval-k", type=int, default=2)
    p.add_argument("--eval-limit", type=int, default=200)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--max-cells", type=int, default=0, help="run at most N new cells (0: all)")
    p.add_argument("--summary", action="store_true", help="only write the summary of the cells done so far")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs, results = Path(args.runs).resolve(), Path(args.results).resolve()
    domains = [d for d in args.domains.split(",") if d]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    train_args, settings = study.cell_setup(args, runs, domains)
    all_cells = cells(Path(args.sensitivity), domains, seeds)
    # seed by seed, so that every option has a first result early
    pending = sorted((c for c in all_cells if not study.cell_path(results, *c).is_file()), key=lambda c: c[3])
    if args.max_cells or args.summary:
        pending = pending[: 0 if args.summary else args.max_cells]
    print(f"{len(pending)} cells to run", flush=True)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(lambda c: study.run_cell(c, train_args, settings, runs, results), pending))
    summary = summarise(study.read_cells(results), domains, seeds)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (results / "summary.md").write_text(summary_markdown(summary))
    print(summary_markdown(summary), flush=True)
    return 0 if all(o["ok"] for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
