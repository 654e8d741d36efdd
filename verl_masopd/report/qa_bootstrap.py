"""A paired bootstrap interval for the difference A − B between two QA systems, per dataset and macro.

Metrics: avg@k, pass@k and k/k (`qa_scores.PER_QUESTION`), each the mean over a dataset's n
questions of a per-question value v_i (its mean EM over the k attempts, any correct, all
correct), so that a question's k attempts stay together. With d_i = v_i(A) − v_i(B), paired
by question id, the observed difference on a dataset is

    Δ = (1/n) Σ_i v_i(A) − (1/n) Σ_i v_i(B),      and macro Δ = (1/D) Σ_datasets Δ.

Resample b = 1 … R (default R = 2000): in each dataset, draw n question indices i_1 … i_n
uniformly with replacement, the same draw for both systems, and take Δ*_b = (1/n) Σ_m d_{i_m};
the macro Δ*_b is the mean over the datasets of their Δ*_b of the same b (each dataset drawn
independently). The interval at confidence c (0.95) is the percentile interval
[q_{(1−c)/2}, q_{(1+c)/2}] of the R values (numpy's quantile, linear between order statistics).

Draws come from `numpy.random.default_rng(seed)`, datasets in sorted order, questions sorted by
id, so the result depends on the seed and the attempts alone, not on the order of the records.
Both systems must have the same datasets, the same questions in each and the same k; otherwise
ValueError, naming the dataset and a missing question id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from verl_masopd.eval.qa_attempts import QaAttempt, attempts_per_question, by_question
from verl_masopd.report.qa_scores import PER_QUESTION, question_values

DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """The observed difference A − B and its bootstrap interval [low, high]."""

    difference: float
    low: float
    high: float

    def as_dict(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Differences:
    """A − B per dataset (in A's order of first appearance) and macro, for each of PER_QUESTION."""

    a: str
    b: str
    k: int
    resamples: int
    seed: int
    confidence: float
    datasets: dict[str, dict[str, Interval]]
    macro: dict[str, Interval]

    def as_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "k": self.k,
            "resamples": self.resamples,
            "seed": self.seed,
            "confidence": self.confidence,
            "datasets": {d: {m: x.as_dict() for m, x in row.items()} for d, row in self.datasets.items()},
            "macro": {m: x.as_dict() for m, x in self.macro.items()},
        }


def paired_differences(
    a: Iterable[QaAttempt],
    b: Iterable[QaAttempt],
    names: tuple[str, str] = ("A", "B"),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Differences:
    """A − B with its paired bootstrap interval (module docstring); `names` name A and B in
    messages and in the result."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be an integer ≥ 1, got {resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if names[0] == names[1]:
        raise ValueError(f"the two systems need two names, got {names[0]!r} twice")
    grouped = {names[0]: by_question(a), names[1]: by_question(b)}
    k = _check_paired(grouped, names)
    values = {}
    for dataset in grouped[names[0]]:
        ids = sorted(grouped[names[0]][dataset])
        values[dataset] = [question_values({q: grouped[name][dataset][q] for q in ids}) for name in names]
    rng = np.random.default_rng(seed)
    draws = {}
    for dataset in sorted(values):
        va, vb = values[dataset]
        n = len(va[PER_QUESTION[0]])
        picks = rng.integers(0, n, size=(resamples, n))
        draws[dataset] = {m: (va[m] - vb[m])[picks].mean(axis=1) for m in PER_QUESTION}
    quantiles = [(1 - confidence) / 2, (1 + confidence) / 2]
    rows, macro = {}, {}
    for dataset, (va, vb) in values.items():
        rows[dataset] = {}
        for m in PER_QUESTION:
            low, high = np.quantile(draws[dataset][m], quantiles)
            rows[dataset][m] = Interval(float(va[m].mean() - vb[m].mean()), float(low), float(high))
    for m in PER_QUESTION:
        macro_draws = np.mean([draws[dataset][m] for dataset in values], axis=0)
        low, high = np.quantile(macro_draws, quantiles)
        observed = float(np.mean([rows[dataset][m].difference for dataset in values]))
        macro[m] = Interval(observed, float(low), float(high))
    return Differences(names[0], names[1], k, resamples, seed, confidence, rows, macro)


def _check_paired(grouped: dict[str, dict[str, dict[str, tuple[QaAttempt, ...]]]], names: tuple[str, str]) -> int:
    """The common k; ValueError naming the first dataset or question one system lacks."""
    ks = {}
    for this, other in (names, names[::-1]):
        try:
            ks[this] = attempts_per_question(grouped[this])
        except ValueError as e:
            raise ValueError(f"{this}: {e}") from None
        for dataset, questions in grouped[this].items():
            if dataset not in grouped[other]:
                raise ValueError(f"dataset {dataset!r}: in {this}'s attempts, not in {other}'s")
            missing = [q for q in questions if q not in grouped[other][dataset]]
            if missing:
                raise ValueError(
                    f"dataset {dataset!r}: question {missing[0]!r} is in {this}'s attempts, not in {other}'s"
                    + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else "")
                )
    if ks[names[0]] != ks[names[1]]:
        raise ValueError(f"{names[0]} has k = {ks[names[0]]} attempts per question, {names[1]} has {ks[names[1]]}")
    return ks[names[0]]
