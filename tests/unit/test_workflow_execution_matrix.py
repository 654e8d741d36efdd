"""The execution matrix CURE reads: programs run on golden and generated tests, and the matrix the
code workflow builds from its played episodes' final programs and final tests."""

import pytest

from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.execution_matrix import run_matrix
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


def test_programs_run_on_every_test():
    tests = [*GOLDEN, Case("2 3\n", "5\n"), Case("2 3\n", "-1\n")]
    assert run_matrix([RIGHT, WRONG, None], tests, timeout=10.0) == [[1, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]


def played(workflow, texts):
    episode = workflow.reset(PROBLEM)
    workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    return episode


def test_the_matrix_of_played_episodes_uses_the_final_program_and_test():
    workflow = make_workflow("mas", "code", timeout=10.0)
    episodes = [
        played(workflow, {"coder_0": written_program(RIGHT), "tester_0": written_test("2 3", "5")}),
        played(workflow, {"coder_0": written_program(WRONG), "tester_0": "no test case here"}),
    ]
    matrix = workflow.execution_matrix(episodes)
    assert matrix.num_golden == 2
    # episode 0's test 2 3 → 5 passes only the right program; episode 1 wrote no usable test: a column of zeros
    assert matrix.passed.tolist() == [[1, 1, 1, 0], [0, 0, 0, 0]]


def test_two_testers_per_episode_are_refused_naming_the_setting():
    workflow = make_workflow("mas", "code", agents_per_role=2, timeout=10.0)
    test = written_test("2 3", "5")
    texts = {"coder_0": written_program(RIGHT), "coder_1": written_program(RIGHT), "tester_0": test, "tester_1": test}
    with pytest.raises(ValueError, match=r"one Tester per episode \(workflow.agents_per_role=1\), got 2"):
        workflow.execution_matrix([played(workflow, texts)])
