"""RAS's settings and every method's learning rate chosen by measurement on the tiny world: the
sensitivity study, on a validation split disjoint from the held-out test problems.

    python benchmarks/tiny_world_sensitivity.py [--domains math,code] [--seeds 0,1] [--jobs 2]
        [--max-cells N] [--steps 12] [--eval-k 2] [--eval-limit 200] [--runs DIR] [--results DIR]

Cells, per domain and seed, each trained as tiny_world_compare.py trains a method (its recipe in
CPU mode, the tiny_world preset's batch, group size and horizon, the same steps):
  masopd         β ∈ {0, 0.1, 0.25, 0.5, 1} × c ∈ {1, 5} × lr ∈ {3e-4, 1e-3}, β = 0 once per lr
                 (A_k = s_k + 0·clip(Δ_k, ±c) for every c): 18 settings
  masopd-no-pac  lr ∈ {3e-4, 1e-3} at masopd's chosen (β, c), chosen once masopd's whole grid
                 has its results
  every other trained method of the comparison: lr ∈ {3e-4, 1e-3} at its defaults
Training logs no held-out validation (trainer.test_freq=-1). Each cell is then evaluated on the
first --eval-limit validation problems (tiny_world math_tasks.VALIDATION_START) and on the first
--eval-limit held-out test problems, --eval-k samples each, and its training diagnostics are read
from TensorBoard: the mean over the run's steps of every <estimator>/<role>/{opd_term, ras_term,
clip_share, distillation_term} and actor/<role>/entropy (and their per-token-class splits).

Resumable across sessions: a cell's result is RESULTS/cells/<domain>/<method>/<setting>/seed<k>.json
(RESULTS: benchmarks/results/tiny_world_sensitivity/, committed), and a cell with a result is
skipped. --max-cells N runs at most N new cells, then writes the summary (a session's share).

Selection, on validation only: a method's setting is the one of its complete settings (every
domain it applies to × seed has a result) with the highest validation accuracy averaged over the domains of the
per-domain means over seeds; a tie goes to the setting listed first. masopd-no-ras's is the best
of masopd's β = 0 settings (the same runs). tiny_world_compare.py --settings RESULTS/summary.json
trains every method at its choice. RESULTS/summary.json holds
every cell and the choices, RESULTS/summary.md the validation table, the test table beside it,
each setting's difference from its method's choice paired by seed (report/paired.py), the choices
and masopd's training diagnostics per role and token class at its old defaults (β 1, c 5,
lr 1e-3) and at its choice.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tiny_world_compare as compare
from results_file import RESULTS
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from verl_masopd.report.curves import read_scalar
from verl_masopd.report.paired import paired_difference
from verl_masopd.tiny_world.world import ensure_validation_data

STUDY = RESULTS / "tiny_world_sensitivity"
LEARNING_RATES = ("3e-4", "1e-3")
RAS_COEFS = ("0", "0.1", "0.25", "0.5", "1")
RAS_CLIPS = ("1", "5")
DIAGNOSTICS = ("opd_term", "ras_term", "clip_share", "distillation_term", "entropy")
TUNED = ("masopd", "opd", "mas-grpo", "sa-st-grpo", "magrpo", "marft", "at-grpo", "cure", "masopd-no-pac")
OLD_DEFAULT = "beta1_clip5_lr1e-3"  # masopd's defaults before the study: β 1, c 5, the preset's lr 1e-3
TOKEN_CLASSES = ("", "format", "decision", "program", "content")  # "": every token of the role
TERMS = (("masopd", "opd_term"), ("masopd", "ras_term"), ("masopd", "clip_share"), ("actor", "entropy"))


@dataclass(frozen=True)
class Setting:
    """One setting of a method: its name in the results tree and its Hydra overrides."""

    name: str
    overrides: tuple[str, ...]


def lr_setting(lr: str, extra: tuple[tuple[str, str, str], ...] = ()) -> Setting:
    """`extra`: (short name, key, value) triples before the learning rate."""
    name = "_".join([*(f"{short}{value}" for short, _, value in extra), f"lr{lr}"])
    overrides = (*(f"{key}={value}" for _, key, value in extra), f"actor_rollout_ref.actor.optim.lr={lr}")
    return Setting(name, overrides)


def ras_settings() -> list[Setting]:
    """masopd's grid: β = 0 (one c: it has no effect), then β > 0 × c, each × lr."""
    pairs = [("0", RAS_CLIPS[-1])] + [(b, c) for b in RAS_COEFS[1:] for c in RAS_CLIPS]
    return [
        lr_setting(lr, (("beta", "algorithm.masopd.ras_coef", b), ("clip", "algorithm.masopd.ras_clip", c)))
        for b, c in pairs
        for lr in LEARNING_RATES
    ]


def settings_of(method: str, chosen_ras: Setting | None) -> list[Setting]:
    """The settings `method` is run at; masopd-no-pac's need masopd's choice (none before it)."""
    if method == "masopd":
        return ras_settings()
    if method == "masopd-no-pac":
        if chosen_ras is None:
            return []
        ras, prefix = chosen_ras.overrides[:-1], chosen_ras.name.rsplit("_lr", 1)[0]  # the last is the lr
        return [Setting(f"{prefix}_lr{lr}", (*ras, lr_setting(lr).overrides[0])) for lr in LEARNING_RATES]
    return [lr_setting(lr) for lr in LEARNING_RATES]


def cell_path(results: Path, domain: str, method: str, setting: Setting, seed: int) -> Path:
    return results / "cells" / domain / method / setting.name / f"seed{seed}.json"


def accuracy(folder: Path) -> float:
    [row] = list(csv.DictReader(open(folder / "summary.csv")))
    return float(row["accuracy"])


def diagnostics(train_folder: Path) -> dict[str, float]:
    """{tag: mean over logged steps} of the training log's diagnostic scalars."""
    files = sorted(train_folder.glob("**/events.out.tfevents*"))
    tags = set()
    for path in files:
        accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 1})
        accumulator.Reload()
        tags |= {t for t in accumulator.Tags()[SCALARS] if t.rsplit("/", 1)[-1] in DIAGNOSTICS}
    means = {}
    for tag in sorted(tags):
        values = list(read_scalar(files, tag).values())
        means[tag] = round(statistics.fmean(values), 6)
    return means


def run_cell(cell: tuple, args, settings: dict, runs: Path, results: Path) -> dict:
    """Train one cell, evaluate it on validation and test, write its result; returns it."""
    domain, name, setting, seed = cell
    base = compare.METHODS[name]
    method = dataclasses.replace(base, overrides=(*base.overrides, *setting.overrides))
    folder = runs / domain / name / setting.name / f"seed{seed}"
    key = f"{domain}/{name}/{setting.name}/seed{seed}"
    outcome = {"domain": domain, "method": name, "setting": setting.name, "seed": seed}
    result = compare.once(
        folder / "train", runs / "failed" / key / "train", compare.train, method, domain, seed, args, settings[domain]
    )
    seconds = {"train": result["seconds"]}
    if not result["ok"]:
        print(f"{key}: training FAILED (logs under {runs / 'failed' / key})", flush=True)
        return {**outcome, "ok": False}
    models = compare.trained_models(folder / "train")
    for split in ("validation", "test"):
        data = {**settings[domain], "val_files": settings[domain]["splits"][split]}
        result = compare.once(
            folder / split, runs / "failed" / key / split, compare.evaluate, models, base.workflow, seed, args, data, []
        )
        seconds[split] = result["seconds"]
        if not result["ok"]:
            print(f"{key}: {split} evaluation FAILED (logs under {runs / 'failed' / key})", flush=True)
            return {**outcome, "ok": False}
    outcome.update(
        ok=True,
        overrides=list(setting.overrides),
        validation_accuracy=accuracy(folder / "validation"),
        test_accuracy=accuracy(folder / "test"),
        seconds=seconds,
        diagnostics=diagnostics(folder / "train"),
    )
    path = cell_path(results, domain, name, setting, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome, indent=2) + "\n")
    print(f"{key}: validation {outcome['validation_accuracy']:.3f}, test {outcome['test_accuracy']:.3f}", flush=True)
    return outcome


def read_cells(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "cells").glob("*/*/*/seed*.json"))]


def choose(cells: list[dict], method: str, settings: list[Setting], domains: list[str], seeds: list[int]) -> dict:
    """{"setting", "validation", "test"} of `method`'s best complete setting (None when none is)."""
    best = None
    for setting in settings if domains else []:
        found = {(c["domain"], c["seed"]): c for c in cells if c["method"] == method and c["setting"] == setting.name}
        if any((d, s) not in found for d in domains for s in seeds):
            continue
        scores = {
            split: statistics.fmean(
                statistics.fmean(found[(d, s)][f"{split}_accuracy"] for s in seeds) for d in domains
            )
            for split in ("validation", "test")
        }
        if best is None or scores["validation"] > best["validation"]:
            best = {"setting": setting.name, "overrides": list(setting.overrides), **scores}
    return best or {"setting": None}


def method_domains(method: str, domains: list[str]) -> list[str]:
    """The study's domains that `method` applies to (cure: code only)."""
    return [d for d in domains if d in compare.METHODS[method].domains]


def grid_complete(
    cells: list[dict], method: str, settings: list[Setting], domains: list[str], seeds: list[int]
) -> bool:
    """Every setting of `method` has a result for every domain × seed."""
    done = {(c["setting"], c["domain"], c["seed"]) for c in cells if c["method"] == method}
    return all((s.name, d, k) in done for s in settings for d in domains for k in seeds)


def summarise(cells: list[dict], domains: list[str], seeds: list[int]) -> dict:
    """Every method's choice; masopd's (and so masopd-no-pac's settings) only once its grid is complete."""
    grid = ras_settings()
    complete = grid_complete(cells, "masopd", grid, domains, seeds)
    chosen = {"masopd": choose(cells, "masopd", grid, domains, seeds) if complete else {"setting": None}}
    ras = next((s for s in grid if s.name == chosen["masopd"]["setting"]), None)
    for method in TUNED:
        if method != "masopd":
            chosen[method] = choose(cells, method, settings_of(method, ras), method_domains(method, domains), seeds)
    no_ras = [s for s in ras_settings() if s.name.startswith("beta0_")]
    chosen["masopd-no-ras"] = choose(cells, "masopd", no_ras, domains, seeds)
    table = {}
    for c in cells:
        row = table.setdefault(f"{c['method']} {c['setting']}", {})
        for split in ("validation", "test"):
            row.setdefault(f"{c['domain']} {split}", []).append(c[f"{split}_accuracy"])
    return {
        "domains": domains,
        "seeds": seeds,
        "chosen": chosen,
        "table": table,
        "differences": differences_from_chosen(cells, chosen),
        "cells": cells,
    }


def differences_from_chosen(cells: list[dict], chosen: dict) -> dict:
    """Each setting minus its method's chosen setting, per domain and split, paired by seed
    (report/paired.py: mean, standard error, 95% t-interval); methods without a choice have none."""
    values: dict[tuple, dict[int, float]] = {}
    for c in cells:
        for split in ("validation", "test"):
            values.setdefault((c["method"], c["setting"], c["domain"], split), {})[c["seed"]] = c[f"{split}_accuracy"]
    out = {}
    for (method, setting, domain, split), mine in values.items():
        best = chosen.get(method, {}).get("setting")
        if best is None or setting == best:
            continue
        d = paired_difference(mine, values.get((method, best, domain, split), {}))
        if d is not None:
            out.setdefault(f"{method} {setting}", {})[f"{domain} {split}"] = d.as_dict()
    return out


def summary_markdown(summary: dict) -> str:
    columns = [f"{d} {split}" for split in ("validation", "test") for d in summary["domains"]]
    heads = [*columns, *(f"− chosen {c}" for c in columns)]
    lines = [
        "Accuracy (%) on validation problems (settings chosen on these) and on held-out test problems,"
        f" mean ± std over seeds {summary['seeds']}; − chosen: the setting minus its method's chosen"
        " setting, paired by seed (mean ± standard error [95% t-interval]):",
        "",
        "| method | setting | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(heads),
    ]
    for row, values in summary["table"].items():
        method, setting = row.split(" ", 1)
        cells = []
        for column in columns:
            v = values.get(column, [])
            std = f" ± {100 * statistics.stdev(v):.1f}" if len(v) > 1 else ""
            cells.append(f"{100 * statistics.fmean(v):.1f}{std} (n={len(v)})" if v else "—")
        differences = summary["differences"].get(row, {})
        for column in columns:
            d = differences.get(column)
            cells.append(
                f"{100 * d['mean']:+.1f} ± {100 * d['se']:.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
                if d
                else "—"
            )
        lines.append(f"| {method} | {setting} | " + " | ".join(cells) + " |")
    lines += ["", "Chosen on validation (mean over domains):", ""]
    for method, c in summary["chosen"].items():
        if c["setting"] is None:
            lines.append(f"- {method}: no complete setting yet")
        else:
            lines.append(
                f"- {method}: {c['setting']} (validation {100 * c['validation']:.1f}, test {100 * c['test']:.1f})"
            )
    chosen = summary["chosen"]["masopd"]["setting"]
    if chosen is not None:
        lines += ["", diagnostics_markdown(summary["cells"], summary["domains"], (OLD_DEFAULT, chosen))]
    return "\n".join(lines) + "\n"


def diagnostics_markdown(cells: list[dict], domains: list[str], settings: tuple[str, ...]) -> str:
    """masopd's training diagnostics at `settings`, per domain, role and token class: the mean over
    seeds (of each run's mean over steps) of the OPD term s_k, the clipped RAS term β·clip(Δ_k, ±c),
    the share of tokens with |Δ_k| > c and the policy's entropy on its sampled tokens."""
    heads = [f"{term.replace('_', ' ')} {name}" for _, term in TERMS for name in settings]
    lines = [
        f"masopd's training diagnostics per token, mean over steps and seeds, at {' and '.join(settings)}:",
        "",
        "| domain | role | tokens | " + " | ".join(heads) + " |",
        "|---|---|---|" + "---|" * len(heads),
    ]
    for domain in domains:
        masopd = [c for c in cells if c["method"] == "masopd" and c["domain"] == domain]
        runs = {name: [c["diagnostics"] for c in masopd if c["setting"] == name] for name in settings}
        roles = sorted({tag.split("/")[1] for found in runs.values() for d in found for tag in d})
        for role, token_class in ((r, k) for r in roles for k in TOKEN_CLASSES):
            values = []
            for prefix, term in TERMS:
                tag = "/".join(p for p in (prefix, role, token_class, term) if p)
                for name in settings:
                    found = [d[tag] for d in runs[name] if tag in d]
                    sign = "+" if term.endswith("_term") else ""
                    values.append(f"{statistics.fmean(found):{sign}.3f}" if found else "—")
            lines.append(f"| {domain} | {role} | {token_class or 'all'} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=str(compare.ROOT / ".cache" / "sensitivity" / "runs"), help="run folders")
    p.add_argument("--cache", default=str(compare.ROOT / ".cache" / "compare" / "world"), help="tiny_world.py --cache")
    p.add_argument("--results", default=str(STUDY), help="committed results folder RESULTS")
    p.add_argument("--domains", default="math,code")
    p.add_argument("--methods", default=",".join(TUNED), help=f"comma-separated, of {', '.join(TUNED)}")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--eval-k", type=int, default=2)
    p.add_argument("--eval-limit", type=int, default=200)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--max-cells", type=int, default=0, help="run at most N new cells (0: all)")
    return p


def pending_cells(args, results: Path, domains: list[str], seeds: list[int]) -> list[tuple]:
    """The cells without a result, masopd's first (masopd-no-pac's settings follow its choice)."""
    summary = summarise(read_cells(results), domains, seeds)
    ras = next((s for s in ras_settings() if s.name == summary["chosen"]["masopd"]["setting"]), None)
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in TUNED]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; choose from {list(TUNED)}")
    cells = [
        (domain, method, setting, seed)
        for method in methods
        for setting in settings_of(method, ras)
        for domain in method_domains(method, domains)
        for seed in seeds
    ]
    return [c for c in cells if not cell_path(results, c[0], c[1], c[2], c[3]).is_file()]


def cell_setup(args, runs: Path, domains: list[str]) -> tuple[argparse.Namespace, dict]:
    """The comparison's arguments for a cell (no validation during training) and each domain's
    settings with its validation and test splits."""
    train_args = compare.build_parser().parse_args(
        [
            "--cache", args.cache, "--steps", str(args.steps), "--eval-k", str(args.eval_k),
            "--eval-limit", str(args.eval_limit), "--jobs", str(args.jobs),
            "--override", "trainer.test_freq=-1", "--override", "trainer.val_before_train=false",
        ]
    )  # fmt: skip
    settings = {}
    for domain in domains:
        settings[domain] = compare.domain_settings(train_args, domain, runs)
        validation = ensure_validation_data(Path(args.cache).resolve() / "data", domain, args.eval_limit)
        settings[domain]["splits"] = {"validation": str(validation), "test": settings[domain]["val_files"]}
    return train_args, settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs, results = Path(args.runs).resolve(), Path(args.results).resolve()
    domains = [d for d in args.domains.split(",") if d]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    train_args, settings = cell_setup(args, runs, domains)
    pending = pending_cells(args, results, domains, seeds)
    if args.max_cells:
        pending = pending[: args.max_cells]
    print(f"{len(pending)} cells to run", flush=True)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(lambda cell: run_cell(cell, train_args, settings, runs, results), pending))
    summary = summarise(read_cells(results), domains, seeds)
    summary["session_seconds"] = round(time.perf_counter() - start, 1)
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (results / "summary.md").write_text(summary_markdown(summary))
    print(summary_markdown(summary))
    return 1 if any(not o["ok"] for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
