"""CURE's per-problem execution matrices from a step's episodes (notes/baselines.md, CURE).

For the G episodes of a problem: program j = the episode's submission (the Coder's last
program), generated test k = the Tester's last test case. B = cure_execution_matrix(programs,
golden tests, generated tests); an episode whose Tester left no usable test case contributes a
column of zeros (a test no program passes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verl_masopd.algos.cure import ExecutionMatrix
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup
from verl_masopd.workflows.code import cure_execution_matrix, tester_case

TESTER = "tester_0"


def cure_matrices(groups: Sequence[RolloutGroup], timeout: float) -> dict[str, ExecutionMatrix]:
    """{problem uid: ExecutionMatrix} over the episodes of each rollout group."""
    return {group.uid: _matrix(group.episodes, timeout) for group in groups}


def _matrix(group: list[EpisodeResult], timeout: float) -> ExecutionMatrix:
    problem = group[0].episode.problem
    programs = [r.judgement.submission for r in group]
    cases = [tester_case(r.episode.turns[-1].actions[TESTER], problem.fn_name)[0] for r in group]
    usable = [k for k, case in enumerate(cases) if case is not None]
    rows = cure_execution_matrix(programs, list(problem.tests), [cases[k] for k in usable], problem.fn_name, timeout)
    num_golden = len(problem.tests)
    passed = np.zeros((len(group), num_golden + len(group)), dtype=np.int64)
    for j, row in enumerate(rows):
        passed[j, :num_golden] = row[:num_golden]
        passed[j, [num_golden + k for k in usable]] = row[num_golden:]
    return ExecutionMatrix(tuple(r.episode_id for r in group), passed, num_golden)
