"""CURE's execution matrix B of each problem from a step's episodes (cure.py; docs/method.md, "RL baselines").

For the G episodes of a problem: program j = the episode's submission (the workflow's final
program, `judgement.submission`), generated test k = the test case of the episode's Tester in
its last turn (`workflow.final_tests`). B[j][l] = 1 iff program j, run on the input of test l
(the t golden tests first, then the G generated ones), finishes cleanly and prints test l's
expected output; a missing program gives a row of zeros, and an episode whose Tester left no
usable test case a column of zeros (a test no program passes). One Tester per episode: the
start-up check rejects workflow.agents_per_role > 1 with CURE (specs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from verl_masopd.algos.cure import ExecutionMatrix
from verl_masopd.verify import DEFAULT_FLOAT_TOL
from verl_masopd.workflows.execution import JobBatch, run_passes, runnable
from verl_masopd.workflows.problem import TestCase

if TYPE_CHECKING:
    from verl_masopd.rollout.records import EpisodeResult, RolloutGroup


def cure_execution_matrix(
    programs: list[str | None],
    tests: list[TestCase],
    generated: list[TestCase],
    fn_name: str | None = None,
    timeout: float = 30.0,
    float_tol: float | None = DEFAULT_FLOAT_TOL,
) -> list[list[int]]:
    """B ∈ {0,1}^{n×(t+m)} of `programs` on the t golden `tests`, then the m `generated` ones."""
    columns = list(tests) + list(generated)
    batch = JobBatch()
    index = [[batch.add(runnable(p, fn_name), t.input) if p else None for t in columns] for p in programs]
    results = batch.run(timeout)
    return [
        [
            int(i is not None and run_passes(results[i], t.output, fn_name, float_tol))
            for i, t in zip(row, columns, strict=True)
        ]
        for row in index
    ]


def cure_matrices(groups: Sequence[RolloutGroup], workflow) -> dict[str, ExecutionMatrix]:
    """{problem uid: ExecutionMatrix} over the episodes of each rollout group; `workflow` is the
    code workflow that played them (its final tests and execution timeout)."""
    return {group.uid: _matrix(group.episodes, workflow) for group in groups}


def _matrix(group: list[EpisodeResult], workflow) -> ExecutionMatrix:
    problem = group[0].episode.problem
    programs = [r.judgement.submission for r in group]
    cases = [_one_test(workflow.final_tests(r.episode)) for r in group]
    usable = [k for k, case in enumerate(cases) if case is not None]
    rows = cure_execution_matrix(
        programs, list(problem.tests), [cases[k] for k in usable], problem.fn_name, workflow.timeout
    )
    num_golden = len(problem.tests)
    passed = np.zeros((len(group), num_golden + len(group)), dtype=np.int64)
    for j, row in enumerate(rows):
        passed[j, :num_golden] = row[:num_golden]
        passed[j, [num_golden + k for k in usable]] = row[num_golden:]
    return ExecutionMatrix(tuple(r.episode_id for r in group), passed, num_golden)


def _one_test(tests: list[TestCase | None]) -> TestCase | None:
    if len(tests) != 1:
        raise ValueError(f"CURE needs one Tester per episode (workflow.agents_per_role=1), got {len(tests)}")
    return tests[0]
