"""Run every reference solution of a code parquet file against its own golden tests.

A reference that fails its tests points at broken test data (or a broken reference): the report
lists those problems so they can be fixed or dropped before training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from data_prep.schema import read_problems
from verl_masopd.sandbox import run_many, wrap_call_based
from verl_masopd.verify import outputs_match
from verl_masopd.workflows.problem import CODE, Problem


@dataclass(frozen=True)
class Failure:
    uid: str
    failed: int
    total: int
    first_reason: str


@dataclass
class CheckReport:
    checked: int = 0
    passed: int = 0
    without_reference: int = 0
    not_code: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.checked if self.checked else 0.0

    def format(self) -> str:
        lines = [
            f"checked {self.checked} reference solutions: {self.passed} pass all their tests "
            f"({self.pass_rate:.1%}); {self.without_reference} code problems without a reference, "
            f"{self.not_code} non-code rows skipped"
        ]
        for failure in self.failures:
            lines.append(
                f"  FAIL {failure.uid}: {failure.failed}/{failure.total} tests fail, first: {failure.first_reason}"
            )
        return "\n".join(lines)


def check_solutions(
    path: str | Path, limit: int | None = None, timeout: float = 10.0, max_workers: int | None = None
) -> CheckReport:
    """Check the first `limit` problems that have a reference solution (all of them by default)."""
    report = CheckReport()
    candidates = []
    for problem in read_problems(path):
        if problem.domain != CODE:
            report.not_code += 1
        elif not problem.reference_solution:
            report.without_reference += 1
        elif limit is None or len(candidates) < limit:
            candidates.append(problem)
    for problem in tqdm(candidates, desc="check-solutions", unit="problem", leave=False):
        failure = _check(problem, timeout, max_workers)
        report.checked += 1
        if failure is None:
            report.passed += 1
        else:
            report.failures.append(failure)
    return report


def _check(problem: Problem, timeout: float, max_workers: int | None) -> Failure | None:
    code = problem.reference_solution
    if problem.fn_name:
        code = wrap_call_based(code, problem.fn_name)
    results = run_many([(code, test.input) for test in problem.tests], timeout=timeout, max_workers=max_workers)
    reasons = [_failure_reason(result, test.output) for result, test in zip(results, problem.tests, strict=True)]
    failed = [(number, reason) for number, reason in enumerate(reasons) if reason]
    if not failed:
        return None
    number, reason = failed[0]
    return Failure(problem.uid, len(failed), len(problem.tests), f"test {number}: {reason}")


def _failure_reason(result, expected: str) -> str:
    if result.timed_out:
        return "timed out"
    if not result.ok:
        last_stderr_line = (result.stderr.strip().splitlines() or [""])[-1]
        return (result.error or f"exit code {result.exit_code}: {last_stderr_line}")[:200]
    if not outputs_match(result.stdout, expected):
        return f"wrong output {result.stdout[:60]!r}, expected {expected[:60]!r}"
    return ""
