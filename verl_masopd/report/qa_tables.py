"""The QA report's tables, from each system's attempts: datasets as columns, then Macro (the layout
of the paper's Table 1).

`qa_tables({system: attempts})` gives one score table per metric of `qa_scores.METRICS`, one row
per system (in the mapping's order), and one differences table per pair of systems (A, B): rows
avg@k, pass@k, k/k, cells A − B with its paired bootstrap interval (`qa_bootstrap.py`). The
default pairs compare the first system with each other one (first − other).

Columns are the datasets in the order they first appear (systems in order, then their attempts),
then Macro. A system without attempts on a dataset has no cell there (None) and no Macro cell,
its macro average being over other datasets. The best value of a column is marked in the
tables of avg@k, pass@k, k/k, sub-EM and relaxed EM (ties: all of them). Every system must
have the same k.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from verl_masopd.eval.qa_attempts import QaAttempt
from verl_masopd.report.qa_bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Interval, paired_differences
from verl_masopd.report.qa_scores import METRICS, PER_QUESTION, system_scores

MACRO = "Macro"
RATE, COUNT, TOKENS, DIFFERENCE = "rate", "count", "tokens", "difference"
# metric: (kind, what it measures)
DESCRIPTIONS = {
    "avg_at_k": (RATE, "mean EM over attempts"),
    "pass_at_k": (RATE, "questions with a correct attempt"),
    "all_k": (RATE, "questions with every attempt correct"),
    "sub_em": (RATE, "mean sub-EM over attempts"),
    "relaxed_em": (RATE, "mean relaxed EM over attempts"),
    "failure_rate": (RATE, "attempts with a failure"),
    "no_candidate": (COUNT, "attempts without a candidate answer"),
    "empty_candidate": (COUNT, "attempts with an empty answer tag"),
    "untagged": (COUNT, "attempts without an answer tag"),
    "rescued": (COUNT, "untagged attempts with EM 0 that relaxed EM scores 1"),
    "tokens_generated": (TOKENS, "tokens generated per episode"),
    "tokens_read": (TOKENS, "tokens read per episode"),
}
BEST_MARKED = (*PER_QUESTION, "sub_em", "relaxed_em")


@dataclass(frozen=True)
class QaTable:
    """rows: {row label: {column: value}}; a score table's values are floats (None: missing), a
    differences table's are Intervals."""

    title: str
    kind: str
    columns: list[str]
    rows: dict[str, dict[str, float | Interval | None]]
    best: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "title": self.title,
            "kind": self.kind,
            "columns": self.columns,
            "best": self.best,
            "rows": {
                label: {c: (x.as_dict() if isinstance(x, Interval) else x) for c, x in row.items()}
                for label, row in self.rows.items()
            },
        }


def metric_label(metric: str, k: int) -> str:
    """avg@k, pass@k and k/k with the number k; the other metrics' names in words."""
    special = {"avg_at_k": f"avg@{k}", "pass_at_k": f"pass@{k}", "all_k": f"{k}/{k}", "sub_em": "sub-EM"}
    return special.get(metric, metric.replace("_em", " EM").replace("_", " "))


def qa_tables(
    systems: Mapping[str, Iterable[QaAttempt]],
    pairs: Sequence[tuple[str, str]] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[QaTable]:
    """The score tables (METRICS order), then the differences tables (`pairs` order)."""
    attempts = {name: list(found) for name, found in systems.items()}
    if not attempts:
        raise ValueError("no systems")
    scores = {}
    for name, found in attempts.items():
        try:
            scores[name] = system_scores(found)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    ks = {name: s.k for name, s in scores.items()}
    if len(set(ks.values())) > 1:
        raise ValueError(f"systems with different k (attempts per question): {ks}")
    k = next(iter(ks.values()))
    if pairs is None:
        first, *others = attempts
        pairs = [(first, other) for other in others]
    for a, b in pairs:
        for name in (a, b):
            if name not in attempts:
                raise ValueError(f"pair ({a!r}, {b!r}): no system {name!r} (systems: {list(attempts)})")
    datasets = list(dict.fromkeys(d for s in scores.values() for d in s.datasets))
    columns = [*datasets, MACRO]
    tables = []
    for metric in METRICS:
        kind, what = DESCRIPTIONS[metric]
        rows = {}
        for name, s in scores.items():
            rows[name] = {d: s.datasets[d][metric] if d in s.datasets else None for d in datasets}
            rows[name][MACRO] = s.macro[metric] if len(s.datasets) == len(datasets) else None
        best = best_per_column(columns, rows) if metric in BEST_MARKED else {}
        tables.append(QaTable(f"{metric_label(metric, k)}: {what}", kind, columns, rows, best))
    for a, b in pairs:
        diff = paired_differences(attempts[a], attempts[b], (a, b), resamples, seed, confidence)
        shared = [d for d in datasets if d in diff.datasets]
        rows = {
            metric_label(m, k): {**{d: diff.datasets[d][m] for d in shared}, MACRO: diff.macro[m]} for m in PER_QUESTION
        }
        title = (
            f"{a} − {b}: difference with its {confidence * 100:g}% paired bootstrap interval"
            f" ({resamples} resamples, seed {seed})"
        )
        tables.append(QaTable(title, DIFFERENCE, [*shared, MACRO], rows))
    return tables


def best_per_column(columns: list[str], rows: dict[str, dict[str, float | None]]) -> dict[str, list[str]]:
    """{column: the rows with its highest value}."""
    best = {}
    for column in columns:
        values = {label: row[column] for label, row in rows.items() if row[column] is not None}
        if values:
            top = max(values.values())
            best[column] = [label for label, v in values.items() if math.isclose(v, top, rel_tol=0, abs_tol=1e-12)]
    return best
