"""The evaluation statistics of a QA search system, per dataset and macro-averaged.

For a dataset of n questions, question i attempted k times, attempt j scored e_ij = EM ∈ {0, 1}
(s_ij sub-EM, r_ij relaxed EM, f_ij its failure or none; `eval/qa_attempts.py`):

  avg_at_k          avg@k = (1 / nk) Σ_i Σ_j e_ij                      mean EM over all attempts
  pass_at_k         pass@k = (1 / n) Σ_i 1[Σ_j e_ij ≥ 1]               share of questions answered at least once
  all_k             k/k = (1 / n) Σ_i 1[Σ_j e_ij = k]                  share of questions answered every time
  sub_em            (1 / nk) Σ_i Σ_j s_ij
  relaxed_em        (1 / nk) Σ_i Σ_j r_ij
  failure_rate      (1 / nk) Σ_i Σ_j 1[f_ij ≠ none]                    share of attempts with any failure
  no_candidate      Σ_i Σ_j 1[f_ij = no_candidate]                     counts of attempts
  empty_candidate   Σ_i Σ_j 1[f_ij = empty_candidate]
  untagged          Σ_i Σ_j 1[f_ij = untagged]
  rescued           Σ_i Σ_j 1[f_ij = untagged, e_ij = 0, r_ij = 1]     untagged answers relaxed EM read
  tokens_generated  (1 / nk) Σ_i Σ_j (tokens generated in attempt ij)  per episode
  tokens_read       (1 / nk) Σ_i Σ_j (tokens read in attempt ij)       per episode

The macro average of every metric, counts included, is the mean over the system's D datasets
with equal weight: macro(m) = (1 / D) Σ_d m(d). Since every question has k attempts, avg@k,
pass@k and k/k are means over questions of a per-question value (`question_values`: the
question's mean EM, whether any attempt is correct, whether all are), which is what the
paired bootstrap resamples.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from verl_masopd.eval.qa_attempts import FAILURES, QaAttempt, attempts_per_question, by_question

PER_QUESTION = ("avg_at_k", "pass_at_k", "all_k")
METRICS = (
    *PER_QUESTION,
    "sub_em",
    "relaxed_em",
    "failure_rate",
    *FAILURES,
    "rescued",
    "tokens_generated",
    "tokens_read",
)


@dataclass(frozen=True)
class SystemScores:
    """k, {dataset: {metric: value}} (datasets in the order they first appear) and the macro row."""

    k: int
    datasets: dict[str, dict[str, float]]
    macro: dict[str, float]

    def as_dict(self) -> dict:
        return {"k": self.k, "datasets": self.datasets, "macro": self.macro}


def question_values(questions: Mapping[str, Sequence[QaAttempt]]) -> dict[str, np.ndarray]:
    """{metric of PER_QUESTION: one value per question, in the mapping's order}: the question's
    mean EM, 1 when any attempt has EM 1, 1 when every attempt has."""
    em = np.array([[a.em for a in attempts] for attempts in questions.values()], dtype=float)
    return {"avg_at_k": em.mean(axis=1), "pass_at_k": em.max(axis=1), "all_k": em.min(axis=1)}


def dataset_scores(questions: Mapping[str, Sequence[QaAttempt]]) -> dict[str, float]:
    """{metric: value} of one dataset's questions (each with its k attempts), formulas above."""
    attempts = [a for found in questions.values() for a in found]
    scores = {name: float(values.mean()) for name, values in question_values(questions).items()}
    scores["sub_em"] = statistics.fmean(a.sub_em for a in attempts)
    scores["relaxed_em"] = statistics.fmean(a.relaxed_em for a in attempts)
    scores["failure_rate"] = statistics.fmean(a.failure is not None for a in attempts)
    scores.update({kind: float(sum(a.failure == kind for a in attempts)) for kind in FAILURES})
    scores["rescued"] = float(sum(a.rescued for a in attempts))
    scores["tokens_generated"] = statistics.fmean(a.tokens_generated for a in attempts)
    scores["tokens_read"] = statistics.fmean(a.tokens_read for a in attempts)
    return {name: scores[name] for name in METRICS}


def system_scores(attempts: Iterable[QaAttempt]) -> SystemScores:
    """Every metric of every dataset of one system's attempts, and their macro averages."""
    grouped = by_question(attempts)
    k = attempts_per_question(grouped)
    datasets = {dataset: dataset_scores(questions) for dataset, questions in grouped.items()}
    macro = {name: statistics.fmean(scores[name] for scores in datasets.values()) for name in METRICS}
    return SystemScores(k, datasets, macro)
