"""The execution matrix B of one problem's episodes (CURE's rewards read it: algos/cure.py;
docs/method.md, "RL baselines").

For the n episodes of a problem: program j = episode j's submission, generated test k = the test
case episode k's Tester wrote in its last turn. B[j][l] = 1 iff program j, run on the input of
test l (the t golden tests first, then the n generated ones), finishes cleanly and prints test
l's expected output (`run_passes`); a missing program gives a row of zeros, and an episode whose
Tester left no usable test case a column of zeros (a test no program passes). The code workflow
builds it from its played episodes (`CodeWorkflow.execution_matrix`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verl_masopd.verify import DEFAULT_FLOAT_TOL
from verl_masopd.workflows.execution import JobBatch, run_passes, runnable
from verl_masopd.workflows.problem import Problem, TestCase


@dataclass(frozen=True)
class ExecutionMatrix:
    """B of one problem, n × (t + n): program row j and generated test column t + j are episode j's."""

    passed: np.ndarray
    num_golden: int

    def __post_init__(self):
        n = len(self.passed)
        if self.passed.shape != (n, self.num_golden + n):
            raise ValueError(
                f"execution matrix has shape {self.passed.shape}, expected ({n}, {self.num_golden} + {n}) "
                f"for {n} episodes and {self.num_golden} golden tests"
            )
        if self.num_golden < 1:
            raise ValueError("execution matrix needs at least one golden test column (num_golden >= 1)")


def run_matrix(
    programs: list[str | None],
    tests: list[TestCase],
    fn_name: str | None = None,
    timeout: float = 30.0,
    float_tol: float | None = DEFAULT_FLOAT_TOL,
) -> list[list[int]]:
    """B[j][l] of `programs` on `tests` (module doc), every run in one concurrent batch."""
    batch = JobBatch()
    index = [[batch.add(runnable(p, fn_name), t.input) if p else None for t in tests] for p in programs]
    results = batch.run(timeout)
    return [
        [
            int(i is not None and run_passes(results[i], t.output, fn_name, float_tol))
            for i, t in zip(row, tests, strict=True)
        ]
        for row in index
    ]


def execution_matrix(
    problem: Problem,
    programs: list[str | None],
    generated: list[TestCase | None],
    timeout: float,
    float_tol: float | None,
) -> ExecutionMatrix:
    """B of `problem` for episode j's program `programs[j]` and test case `generated[j]` (None:
    unusable, a column of zeros)."""
    usable = [k for k, case in enumerate(generated) if case is not None]
    tests = list(problem.tests) + [generated[k] for k in usable]
    rows = run_matrix(programs, tests, problem.fn_name, timeout, float_tol)
    num_golden = len(problem.tests)
    passed = np.zeros((len(programs), num_golden + len(programs)), dtype=np.int64)
    for j, row in enumerate(rows):
        passed[j, :num_golden] = row[:num_golden]
        passed[j, [num_golden + k for k in usable]] = row[num_golden:]
    return ExecutionMatrix(passed, num_golden)
