"""The report's tables, from the evaluations' summary rows.

Main table: one row per method, one column per benchmark (grouped by domain) plus each domain's
average; a cell is mean ± std over seeds (stats.py) of the accuracy. A seed's domain average is
the mean of its accuracies on every benchmark of that domain in the table; a seed that lacks
one has no average. The best mean per column is marked (ties: all of them).

Role-specialisation and collaboration table (one per domain), per method evaluated in that
domain, from the seeds' values, each the mean over the domain's benchmarks where the evaluation measured it:
  Δ <role>                mean role advantage Δ̄ of the role's held-out responses (eval --teacher)
  swap drop               accuracy − accuracy with the roles' models swapped (eval --swap-roles)
  agreement@t             (episodes that agreed at turn t) / (episodes that played turn t)
  turns to agreement      mean turns of the episodes that ended in agreement
  revise at fault         share of at-fault responses after a conflict that changed at t+1
  hold when correct       share of correct responses after a conflict that stayed the same
  format violations <role> share of the role's responses with a parse error
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from verl_masopd.report.layout import Evaluation, is_number
from verl_masopd.report.stats import Cell, cell, mean_of_present

RATE, POINTS, DELTA, TURNS = "rate", "points", "delta", "turns"


@dataclass
class Table:
    title: str
    columns: list[str]
    kinds: dict[str, str]
    rows: dict[str, dict[str, Cell | None]]
    seeds: dict[str, int]
    best: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "title": self.title,
            "columns": self.columns,
            "kinds": self.kinds,
            "seeds": self.seeds,
            "best": self.best,
            "rows": {
                method: {c: (x.as_dict() if x is not None else None) for c, x in row.items()}
                for method, row in self.rows.items()
            },
        }


def method_order(evaluations: list[Evaluation], methods: list[str] | None) -> list[str]:
    """`methods` (those with evaluations, in that order) or every method found, sorted."""
    found = sorted({e.method for e in evaluations})
    if not methods:
        return found
    unknown = [m for m in methods if m not in found]
    if unknown:
        raise ValueError(f"--methods: no evaluations of {unknown} (found {found})")
    return list(methods)


def seed_counts(evaluations: list[Evaluation], methods: list[str]) -> dict[str, int]:
    return {m: len({e.seed for e in evaluations if e.method == m}) for m in methods}


def main_table(evaluations: list[Evaluation], methods: list[str]) -> Table:
    plain = [e for e in evaluations if not e.swapped]
    domain_of = {e.benchmark: e.domain for e in plain}
    accuracy = {(e.method, e.seed, e.benchmark): e.summary["accuracy"] for e in plain}
    columns, groups = [], {}
    for domain in sorted(set(domain_of.values())):
        benchmarks = sorted(b for b, d in domain_of.items() if d == domain)
        groups[f"{domain} avg"] = benchmarks
        columns += [*benchmarks, f"{domain} avg"]
    rows = {}
    for method in methods:
        seeds = sorted({e.seed for e in plain if e.method == method})
        row = {}
        for column in columns:
            benchmarks = groups.get(column, [column])
            per_seed, measured = [], []
            for seed in seeds:
                values = [accuracy.get((method, seed, b)) for b in benchmarks]
                if all(v is not None for v in values):
                    per_seed.append(sum(values) / len(values))
                    measured.append(seed)
            row[column] = cell(per_seed, measured)
        rows[method] = row
    table = Table("Accuracy (mean ± std over seeds)", columns, dict.fromkeys(columns, RATE), rows, {})
    table.seeds = seed_counts(plain, methods)
    table.best = best_per_column(table)
    return table


def best_per_column(table: Table) -> dict[str, list[str]]:
    best = {}
    for column in table.columns:
        means = {m: row[column].mean for m, row in table.rows.items() if row[column] is not None}
        if means:
            top = max(means.values())
            best[column] = [m for m, v in means.items() if math.isclose(v, top, rel_tol=0, abs_tol=1e-12)]
    return best


def role_table(evaluations: list[Evaluation], methods: list[str], domain: str) -> Table:
    mine = [e for e in evaluations if e.domain == domain]
    plain = [e for e in mine if not e.swapped]
    roles = sorted({k.split("/", 1)[1] for e in plain for k in e.summary if k.startswith("format_violations/")})
    horizon = max(int(e.settings["horizon"]) for e in plain)
    columns = [f"Δ {r}" for r in roles] + ["swap drop"]
    columns += [f"agreement@{t}" for t in range(horizon)]
    columns += ["turns to agreement", "revise at fault", "hold when correct"]
    columns += [f"format violations {r}" for r in roles]
    kinds = {c: RATE for c in columns}
    kinds.update({f"Δ {r}": DELTA for r in roles})
    kinds.update({"swap drop": POINTS, "turns to agreement": TURNS})
    swapped = {(e.method, e.seed, e.benchmark): e.summary["accuracy"] for e in mine if e.swapped}
    per_seed: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for e in plain:
        per_seed[(e.method, e.seed)].append(_role_values(e, roles, horizon, swapped))
    rows = {}
    for method in [m for m in methods if any(e.method == m for e in plain)]:
        seeds = sorted(s for m, s in per_seed if m == method)
        row = {}
        for c in columns:
            found = {s: mean_of_present([x[c] for x in per_seed[(method, s)]]) for s in seeds}
            present = [s for s in seeds if found[s] is not None]
            row[c] = cell([found[s] for s in present], present)
        rows[method] = row
    table = Table(f"Role specialisation and collaboration ({domain})", columns, kinds, rows, {})
    table.seeds = seed_counts(plain, list(rows))
    return table


def _role_values(e: Evaluation, roles: list[str], horizon: int, swapped: dict) -> dict[str, float | None]:
    s = e.summary
    values = {f"Δ {r}": s.get(f"role_advantage/{r}") for r in roles}
    swap = swapped.get((e.method, e.seed, e.benchmark))
    values["swap drop"] = s["accuracy"] - swap if swap is not None else None
    values.update({f"agreement@{t}": s.get(f"agreement@{t}") for t in range(horizon)})
    values["turns to agreement"] = s.get("turns_to_agreement")
    values["revise at fault"] = s.get("revise_rate_at_fault")
    values["hold when correct"] = s.get("hold_rate_correct")
    values.update({f"format violations {r}": s.get(f"format_violations/{r}") for r in roles})
    return {k: (v if is_number(v) else None) for k, v in values.items()}
