"""The QA attempts of a report's evaluations, as the systems of its QA tables (qa_tables.py).

An evaluation of the search workflow writes its attempts to `qa_attempts.jsonl`
(eval/qa_attempts.py). The attempts of one method and seed, over its evaluations (eval/, not
eval-swap/; its benchmarks together are the system's datasets), are one system, named by its
method, or "<method>/seed<k>" when that method has attempts from several seeds: the QA
statistics are over one system's k attempts per question, so seeds are never pooled. Systems
come in the report's method order, then by seed. A search evaluation without the file is
refused, named.
"""

from __future__ import annotations

from verl_masopd.eval.qa_attempts import QA_ATTEMPTS_FILE, QaAttempt, read_attempts
from verl_masopd.report.layout import Evaluation

SEARCH = "search"


def qa_systems(evaluations: list[Evaluation], methods: list[str]) -> dict[str, list[QaAttempt]]:
    """{system name: its attempts} of the evaluations that hold QA attempts (module docstring);
    `methods`: the report's method order, every method of `evaluations`."""
    found: dict[tuple[str, int], list[QaAttempt]] = {}
    for e in (e for e in evaluations if not e.swapped):
        path = e.path / QA_ATTEMPTS_FILE
        if not path.is_file():
            if e.settings.get("workflow") == SEARCH:
                raise ValueError(f"{path}: missing (write it with this version of python -m verl_masopd.eval)")
            continue
        found.setdefault((e.method, e.seed), []).extend(read_attempts(path))
    systems = {}
    for method, seed in sorted(found, key=lambda key: (methods.index(key[0]), key[1])):
        seeds = sum(m == method for m, _ in found)
        systems[method if seeds == 1 else f"{method}/seed{seed}"] = found[(method, seed)]
    return systems
