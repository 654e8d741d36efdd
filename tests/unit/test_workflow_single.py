"""SA+ST and SA+MT: one agent, its own previous output as context, the self-consistency stop."""

import dataclasses

import pytest

from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case
from verl_masopd.workflows.single import SA_CODER_INSTRUCTION, SA_REASONER_INSTRUCTION

MATH_PROBLEM = Problem(uid="half", domain="math", statement="What is 3 divided by 6?", answer="1/2")
CODE_PROBLEM = Problem(
    uid="sum",
    domain="code",
    statement="Read two integers a and b and print a + b.",
    tests=(Case("123456 654321\n", "777777\n"), Case("31337 4242\n", "35579\n")),
    public_tests=(Case("1 2\n", "3\n"), Case("-5 5\n", "0\n")),
)
RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
RIGHT_VARIANT = "print(sum(map(int, input().split())))\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"


def answer(value: str) -> str:
    return f"Some reasoning.\n#### {value}"


def program(code: str) -> str:
    return f"```python\n{code}```"


def play(workflow, problem, texts):
    episode = workflow.reset(problem)
    for text in texts:
        if episode.done:
            break
        workflow.step(episode, {a.name: workflow.parse(a, text) for a in workflow.agents})
    return episode


def test_single_turn_math_answers_once():
    workflow = make_workflow("sa", "math", horizon=1)
    episode = play(workflow, MATH_PROBLEM, [answer("0.5"), answer("0.5")])
    assert len(episode.turns) == 1 and episode.done and episode.turns[0].report == ""
    judgement = workflow.judge(episode)
    assert judgement.correct and judgement.submission == "0.5"
    assert judgement.local[0, "reasoner_0"].value == pytest.approx(1.0)
    assert workflow.attribute(episode, 0) is None


def test_multi_turn_math_stops_on_two_equivalent_answers():
    workflow = make_workflow("sa", "math", horizon=4)
    episode = play(workflow, MATH_PROBLEM, [answer("2"), answer("1/2"), answer("0.5"), answer("7")])
    assert [t.agreed for t in episode.turns] == [False, False, True] and episode.done
    assert workflow.judge(episode).submission == "0.5"
    prompt = workflow.render(episode, workflow.agents[0], 1)
    assert prompt[0]["content"] == SA_REASONER_INSTRUCTION
    assert prompt[1]["content"] == f"## Problem\nWhat is 3 divided by 6?\n\n## Your previous output\n{answer('2')}"


def test_multi_turn_math_runs_to_the_horizon_without_consistency():
    workflow = make_workflow("sa", "math", horizon=3)
    episode = play(workflow, MATH_PROBLEM, [answer("1"), "no answer", "no answer", answer("1")])
    assert len(episode.turns) == 3 and not any(t.agreed for t in episode.turns)
    judgement = workflow.judge(episode)
    assert judgement.submission is None and judgement.team == 0.0
    assert judgement.local[2, "reasoner_0"].terms == {"format": 0.0, "answer": 0.0}


def test_code_consistency_compares_outputs_on_public_examples():
    workflow = make_workflow("sa", "code", horizon=4, timeout=10.0)
    episode = play(workflow, CODE_PROBLEM, [program(WRONG), program(RIGHT), program(RIGHT_VARIANT)])
    assert [t.agreed for t in episode.turns] == [False, False, True] and episode.done
    assert episode.turns[2].verifier["agents"]["coder_0"].visible_outputs == ("3", "0")
    judgement = workflow.judge(episode)
    assert judgement.correct and judgement.submission == RIGHT_VARIANT.rstrip()
    assert judgement.local[0, "coder_0"].value == pytest.approx(0.2)
    prompt = workflow.render(episode, workflow.agents[0], 1)
    assert prompt[0]["content"] == SA_CODER_INSTRUCTION and "print(a - b)" in prompt[1]["content"]
    assert "## Execution report" not in prompt[1]["content"] and "777777" not in prompt[1]["content"]


def test_code_without_public_examples_falls_back_to_identical_programs():
    workflow = make_workflow("sa", "code", horizon=4, timeout=10.0)
    problem = dataclasses.replace(CODE_PROBLEM, public_tests=())
    episode = play(workflow, problem, [program(RIGHT), program(RIGHT_VARIANT), program(RIGHT_VARIANT + "\n\n")])
    assert [t.agreed for t in episode.turns] == [False, False, True]


def test_code_programs_failing_on_examples_are_not_consistent():
    workflow = make_workflow("sa", "code", horizon=2, timeout=10.0)
    crash = "raise SystemExit(3)\n"
    episode = play(workflow, CODE_PROBLEM, [program(crash), program(crash)])
    assert [t.agreed for t in episode.turns] == [False, False] and episode.done
    assert workflow.judge(episode).local[1, "coder_0"].terms == {"build": 1.0, "run": 0.0, "pass": 0.0}
