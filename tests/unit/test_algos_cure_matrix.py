"""CURE's execution matrix: programs run on golden and generated tests, and the matrices built
from played episodes through the workflow's final program and final tests."""

import pytest

from verl_masopd.algos.cure_matrix import cure_execution_matrix, cure_matrices
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case

RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
GOLDEN = (Case("123456 654321\n", "777777\n"), Case("31337 4242\n", "35579\n"))
PROBLEM = Problem(uid="sum", domain="code", statement="Print a + b.", tests=GOLDEN, reference_solution=RIGHT)


def written_program(code: str) -> str:
    return f"```python\n{code}```"


def written_test(test_input: str, test_output: str) -> str:
    return f"```input\n{test_input}\n```\n```output\n{test_output}\n```"


def test_cure_execution_matrix():
    generated = [Case("2 3\n", "5\n"), Case("2 3\n", "-1\n")]
    matrix = cure_execution_matrix([RIGHT, WRONG, None], list(GOLDEN), generated, timeout=10.0)
    assert matrix == [[1, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]


def result(workflow, episode_id, texts):
    episode = workflow.reset(PROBLEM)
    workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    return EpisodeResult(episode_id, episode, [], workflow.judge(episode), 0)


def test_matrices_from_played_episodes_use_the_final_program_and_test():
    workflow = make_workflow("mas", "code", timeout=10.0)
    results = [
        result(workflow, "e0", {"coder_0": written_program(RIGHT), "tester_0": written_test("2 3", "5")}),
        result(workflow, "e1", {"coder_0": written_program(WRONG), "tester_0": "no test case here"}),
    ]
    [(uid, matrix)] = cure_matrices([RolloutGroup(PROBLEM, results)], workflow).items()
    assert uid == "sum" and matrix.episode_ids == ("e0", "e1") and matrix.num_golden == 2
    # e0's test 2 3 → 5 passes only the right program; e1 wrote no usable test: a column of zeros
    assert matrix.passed.tolist() == [[1, 1, 1, 0], [0, 0, 0, 0]]


def test_two_testers_per_episode_are_refused_naming_the_setting():
    workflow = make_workflow("mas", "code", agents_per_role=2, timeout=10.0)
    test = written_test("2 3", "5")
    texts = {"coder_0": written_program(RIGHT), "coder_1": written_program(RIGHT), "tester_0": test, "tester_1": test}
    with pytest.raises(ValueError, match="workflow.agents_per_role=1"):
        cure_matrices([RolloutGroup(PROBLEM, [result(workflow, "e0", texts)])], workflow)
