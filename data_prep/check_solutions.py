"""Run every reference solution of a code parquet file against its own golden tests.

A reference that fails its tests points at broken test data (or a broken reference): the report
lists those problems so they can be fixed or dropped before training. Programs run and outputs
compare exactly as for the reward (`runnable`, `outputs_agree`, the same float tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from data_prep.schema import read_problems
from verl_masopd.sandbox import run_many
from verl_masopd.verify import DEFAULT_FLOAT_TOL, outputs_agree
from verl_masopd.workflows.execution import runnable
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
    path: str | Path,
    limit: int | None = None,
    timeout: float = 10.0,
    max_workers: int | None = None,
    float_tol: float | None = DEFAULT_FLOAT_TOL,
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
        failure = _check(problem, timeout, max_workers, float_tol)
        report.checked += 1
        if failure is None:
            report.passed += 1
        else:
            report.failures.append(failure)
    return report


def _check(problem: Problem, timeout: float, max_workers: int | None, float_tol: float | None) -> Failure | None:
    code = runnable(problem.reference_solution, problem.fn_name)
    results = run_many([(code, test.input) for test in problem.tests], timeout=timeout, max_workers=max_workers)
    reasons = [
        _failure_reason(result, test.output, problem.fn_name, float_tol)
        for result, test in zip(results, problem.tests, strict=True)
    ]
    failed = [(number, reason) for number, reason in enumerate(reasons) if reason]
    if not failed:
        return None
    number, reason = failed[0]
    return Failure(problem.uid, len(failed), len(problem.tests), f"test {number}: {reason}")


def _failure_reason(result, expected: str, fn_name: str, float_tol: float | None) -> str:
    if result.timed_out:
        return "timed out"
    if not result.ok:
        last_stderr_line = (result.stderr.strip().splitlines() or [""])[-1]
        return (result.error or f"exit code {result.exit_code}: {last_stderr_line}")[:200]
    if not outputs_agree(result.stdout, expected, fn_name, float_tol):
        return f"wrong output {result.stdout[:60]!r}, expected {expected[:60]!r}"
    return ""
