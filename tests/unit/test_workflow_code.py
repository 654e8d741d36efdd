"""The Coder–Tester workflow with real programs in the real sandbox: agreement, reports, rewards,
attribution, n > 1, bad outputs, the golden-test firewall, and CURE's execution matrix."""

import dataclasses

import pytest

from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import HOLD, REVISE
from verl_masopd.workflows.code import CODER_INSTRUCTION, TESTER_INSTRUCTION
from verl_masopd.workflows.execution_matrix import run_matrix
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case

RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
RIGHT_VARIANT = "print(sum(int(x) for x in input().split()))\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
HALF = "a, b = map(int, input().split())\nprint(a + b if a > 100000 else 0)\n"
GOLDEN = (Case("123456 654321\n", "777777\n"), Case("31337 4242\n", "35579\n"))
GOLDEN_STRINGS = ("123456", "654321", "777777", "31337", "4242", "35579")
PROBLEM = Problem(
    uid="sum",
    domain="code",
    statement="Read two integers a and b from one line and print a + b.\nExample: for the input `1 2` print `3`.",
    tests=GOLDEN,
    public_tests=(Case("1 2\n", "3\n"),),
    reference_solution=RIGHT,
)


def written_program(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```"


def written_test(test_input: str, test_output: str) -> str:
    return f"A small case.\n```input\n{test_input}\n```\n```output\n{test_output}\n```"


def play(workflow, problem, turns):
    episode = workflow.reset(problem)
    for texts in turns:
        workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    return episode


def one_turn(coder_text, tester_text, problem=PROBLEM, **options):
    workflow = make_workflow("mas", "code", **{"timeout": 10.0, **options})
    episode = play(workflow, problem, [{"coder_0": coder_text, "tester_0": tester_text}])
    return workflow, episode


def test_correct_program_and_correct_test_agree_and_end_the_episode():
    workflow, episode = one_turn(written_program(RIGHT), written_test("2 3", "5"))
    turn = episode.turns[0]
    assert turn.agreed and episode.done
    assert "This matches the declared output." in turn.report
    judgement = workflow.judge(episode)
    assert judgement.correct and judgement.team == 1.0 and judgement.submission == RIGHT.rstrip()
    coder_reward, tester_reward = judgement.local[0, "coder_0"], judgement.local[0, "tester_0"]
    assert coder_reward.terms == {"build": 1.0, "run": 1.0, "pass": 1.0} and coder_reward.value == pytest.approx(1.0)
    assert tester_reward.terms == {"valid": 1.0, "spec": 1.0} and tester_reward.value == pytest.approx(1.0)
    assert workflow.attribute(episode, 0) is None


def test_only_coder_wrong_coder_revises_tester_holds():
    workflow, episode = one_turn(written_program(WRONG), written_test("2 3", "5"))
    turn = episode.turns[0]
    assert not turn.agreed and not episode.done
    assert "```input\n2 3\n```" in turn.report and "```output\n5\n```" in turn.report
    assert "```output\n-1\n```" in turn.report and "This does not match the declared output." in turn.report
    attribution = workflow.attribute(episode, 0)
    assert attribution.verdicts == {"coder_0": False, "tester_0": True}
    assert attribution.decisions == {"coder_0": REVISE, "tester_0": HOLD}
    assert attribution.complete and attribution.source == "rules"
    judgement = workflow.judge(episode)
    assert judgement.local[0, "coder_0"].terms == {"build": 1.0, "run": 1.0, "pass": 0.0}
    assert judgement.local[0, "coder_0"].value == pytest.approx(0.2)
    assert judgement.team == 0.0 and not judgement.correct


def test_only_tester_wrong_coder_holds_tester_revises():
    workflow, episode = one_turn(written_program(RIGHT), written_test("2 3", "6"))
    attribution = workflow.attribute(episode, 0)
    assert attribution.decisions == {"coder_0": HOLD, "tester_0": REVISE}
    tester_reward = workflow.judge(episode).local[0, "tester_0"]
    assert tester_reward.terms == {"valid": 1.0, "spec": 0.0} and tester_reward.value == pytest.approx(0.2)
    assert episode.turns[0].verifier["agents"]["tester_0"].reason == "the reference solution prints a different output"


def test_both_wrong_both_revise():
    workflow, episode = one_turn(written_program(WRONG), written_test("2 3", "6"))
    assert workflow.attribute(episode, 0).decisions == {"coder_0": REVISE, "tester_0": REVISE}


def test_without_reference_the_tester_check_cannot_run():
    problem = dataclasses.replace(PROBLEM, reference_solution=None)
    workflow, episode = one_turn(written_program(WRONG), written_test("2 3", "5"), problem=problem)
    attribution = workflow.attribute(episode, 0)
    assert attribution.verdicts == {"coder_0": False, "tester_0": None}
    assert attribution.decisions == {"coder_0": REVISE}
    assert not attribution.complete
    tester_reward = workflow.judge(episode).local[0, "tester_0"]
    assert (tester_reward.value, tester_reward.mask, tester_reward.terms) == (0.0, False, {})


def test_without_golden_tests_the_coder_reward_is_masked():
    problem = dataclasses.replace(PROBLEM, tests=())
    workflow, episode = one_turn(written_program(RIGHT), written_test("2 3", "5"), problem=problem)
    judgement = workflow.judge(episode)
    assert judgement.local[0, "coder_0"].mask is False and judgement.local[0, "coder_0"].value == 0.0
    assert judgement.team == 0.0 and not judgement.correct
    assert workflow.attribute(episode, 0) is None


def test_partial_golden_pass_fraction_is_the_team_signal():
    workflow, episode = one_turn(written_program(HALF), written_test("2 3", "5"))
    judgement = workflow.judge(episode)
    assert judgement.team == 0.5 and not judgement.correct
    assert judgement.local[0, "coder_0"].value == pytest.approx(0.1 + 0.1 + 0.8 * 0.5)


def test_syntax_error_and_crash_score_build_and_run():
    workflow, episode = one_turn(written_program("print(1 +\n"), written_test("2 3", "5"))
    assert workflow.judge(episode).local[0, "coder_0"].terms == {"build": 0.0, "run": 0.0, "pass": 0.0}
    assert "coder_0's program failed: syntax error" in episode.turns[0].report

    workflow, episode = one_turn(written_program("raise ValueError('boom')\n"), written_test("2 3", "5"))
    reward = workflow.judge(episode).local[0, "coder_0"]
    assert reward.terms == {"build": 1.0, "run": 0.0, "pass": 0.0} and reward.value == pytest.approx(0.1)
    assert "ValueError: boom" in episode.turns[0].report


def test_test_input_the_reference_cannot_read_is_invalid():
    workflow, episode = one_turn(written_program(RIGHT), written_test("hello", "5"))
    evidence = episode.turns[0].verifier["agents"]["tester_0"]
    assert evidence.valid is False and evidence.spec is False
    assert evidence.reason.startswith("the reference solution fails on this input")
    assert workflow.judge(episode).local[0, "tester_0"].value == 0.0
    assert workflow.attribute(episode, 0).decisions == {"coder_0": HOLD, "tester_0": REVISE}


def test_test_input_on_which_the_reference_is_not_deterministic_is_invalid():
    """D.4: a valid test is deterministic; the reference prints the clock for negative a."""
    clock = "import time\na, b = map(int, input().split())\nprint(a + b if a >= 0 else time.time_ns())\n"
    problem = dataclasses.replace(PROBLEM, reference_solution=clock)
    _, episode = one_turn(written_program(RIGHT), written_test("2 3", "5"), problem=problem)
    assert episode.turns[0].verifier["agents"]["tester_0"].valid is True
    workflow, episode = one_turn(written_program(RIGHT), written_test("-1 3", "2"), problem=problem)
    evidence = episode.turns[0].verifier["agents"]["tester_0"]
    assert evidence.valid is False and evidence.spec is False
    assert "not deterministic" in evidence.reason
    assert workflow.judge(episode).local[0, "tester_0"].terms == {"valid": 0.0, "spec": 0.0}


def test_golden_tests_never_reach_a_prompt_or_report():
    leaky = "x = input()\nraise ValueError('input was ' + x)\n"
    workflow = make_workflow("mas", "code", timeout=10.0, horizon=3)
    turns = [
        {"coder_0": written_program(leaky), "tester_0": written_test("2 3", "5")},
        {"coder_0": written_program(WRONG), "tester_0": written_test("7 1", "8")},
        {"coder_0": written_program(RIGHT), "tester_0": written_test("7 1", "8")},
    ]
    episode = play(workflow, PROBLEM, turns)
    assert "input was 2 3" in episode.turns[0].report
    assert episode.turns[2].agreed and episode.done
    for turn in range(len(episode.turns) + 1):
        for agent in workflow.agents:
            for role in workflow.roles:
                text = "".join(m["content"] for m in workflow.render(episode, agent, turn, role=role))
                assert not [s for s in GOLDEN_STRINGS if s in text], (turn, agent.name, role)
    assert episode.turns[0].verifier["agents"]["coder_0"].passed == 0
    assert episode.turns[2].verifier["agents"]["coder_0"].passed == 2


def test_prompt_is_rebuilt_from_state_and_role_condition_swaps_only_the_instruction():
    workflow, episode = one_turn(written_program(WRONG), written_test("2 3", "5"))
    coder_agent = workflow.agents[0]
    first = workflow.render(episode, coder_agent, 0)
    assert first[0] == {"role": "system", "content": CODER_INSTRUCTION}
    assert first[1]["role"] == "user" and first[1]["content"].startswith("## Problem\nRead two integers")
    assert "## Your previous output" not in first[1]["content"]
    second = workflow.render(episode, coder_agent, 1)
    for section in ("## Your previous output", "## Latest output of tester_0", "## Execution report"):
        assert section in second[1]["content"]
    assert "print(a - b)" in second[1]["content"]
    as_tester = workflow.render(episode, coder_agent, 1, role="tester")
    assert as_tester[0]["content"] == TESTER_INSTRUCTION and as_tester[1] == second[1]
    with pytest.raises(ValueError, match="no role 'reasoner'"):
        workflow.render(episode, coder_agent, 1, role="reasoner")


def test_horizon_ends_a_disagreeing_episode():
    workflow = make_workflow("mas", "code", timeout=10.0, horizon=2)
    texts = {"coder_0": written_program(WRONG), "tester_0": written_test("2 3", "5")}
    episode = workflow.reset(PROBLEM)
    workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    assert not episode.done
    workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    assert episode.done and len(episode.turns) == 2 and not episode.turns[-1].agreed
    judgement = workflow.judge(episode)
    assert set(judgement.local) == {(t, n) for t in (0, 1) for n in ("coder_0", "tester_0")}
    with pytest.raises(ValueError, match="already done"):
        workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})


def test_bad_outputs_become_recorded_outcomes():
    workflow, episode = one_turn("", "\x00\x01binary")
    turn = episode.turns[0]
    assert turn.actions["coder_0"].error == "empty output"
    assert "tester_0 gave no usable test case: binary output" in turn.report
    judgement = workflow.judge(episode)
    assert judgement.local[0, "coder_0"].mask and judgement.local[0, "coder_0"].value == 0.0
    assert judgement.local[0, "tester_0"].mask and judgement.local[0, "tester_0"].value == 0.0
    assert judgement.submission is None and judgement.team == 0.0

    workflow, episode = one_turn(written_program("pass\n"), "```input\n2 3\n```\nIt prints five.")
    assert "tester_0 gave no usable test case: expected output: no ```output block." in episode.turns[0].report
    workflow, episode = one_turn(written_program("pass\n"), written_test("2 3", "5"))
    assert "coder_0's program printed nothing." in episode.turns[0].report and not episode.turns[0].agreed
    workflow, episode = one_turn("```python\nprint(", written_test("2 3", "5"))
    assert "coder_0 gave no program to run: truncated output" in episode.turns[0].report


def test_enormous_program_output_is_reported_clipped():
    workflow, episode = one_turn(written_program("print('x' * 6_000_000)\n"), written_test("2 3", "5"), shown_chars=500)
    report = episode.turns[0].report
    assert "coder_0's program failed: output truncated" in report
    assert len(report) < 2000


def test_n_agents_agreement_needs_every_pair():
    workflow = make_workflow("mas", "code", agents_per_role=2, timeout=10.0)
    texts = {
        "coder_0": written_program(RIGHT),
        "coder_1": written_program(RIGHT_VARIANT),
        "tester_0": written_test("2 3", "5"),
        "tester_1": written_test("10 20", "30"),
    }
    episode = play(workflow, PROBLEM, [texts])
    assert episode.turns[0].agreed and len(episode.turns[0].verifier["pairs"]) == 4

    texts["tester_1"] = written_test("10 20", "31")
    episode = play(workflow, PROBLEM, [texts])
    assert not episode.turns[0].agreed
    assert [p["match"] for p in episode.turns[0].verifier["pairs"]] == [True, False, True, False]
    attribution = workflow.attribute(episode, 0)
    assert attribution.decisions == {"coder_0": HOLD, "coder_1": HOLD, "tester_0": HOLD, "tester_1": REVISE}


def test_n_agents_majority_submission_and_lowest_index_tie():
    workflow = make_workflow("mas", "code", agents_per_role=3, timeout=10.0)
    texts = {
        "coder_0": written_program(WRONG),
        "coder_1": written_program(RIGHT),
        "coder_2": written_program(RIGHT_VARIANT),
    }
    texts |= {f"tester_{i}": written_test("2 3", "5") for i in range(3)}
    judgement = workflow.judge(play(workflow, PROBLEM, [texts]))
    assert judgement.submission == RIGHT.rstrip() and judgement.team == 1.0

    workflow = make_workflow("mas", "code", agents_per_role=2, timeout=10.0)
    texts = {
        "coder_0": written_program(WRONG),
        "coder_1": written_program(RIGHT),
        "tester_0": written_test("2 3", "5"),
        "tester_1": written_test("1 1", "2"),
    }
    judgement = workflow.judge(play(workflow, PROBLEM, [texts]))
    assert judgement.submission == WRONG.rstrip() and judgement.team == 0.0


def test_call_based_problem_runs_the_named_function():
    problem = Problem(
        uid="add",
        domain="code",
        statement="Implement add(a, b) returning a + b.",
        tests=(Case("[40, 2]", "42"), Case("[1, -1]", "0")),
        reference_solution="def add(a, b):\n    return a + b\n",
        fn_name="add",
    )
    workflow, episode = one_turn(
        written_program("def add(a, b):\n    return a + b\n"), written_test("[2, 3]", "5"), problem=problem
    )
    assert episode.turns[0].agreed
    assert "call-based" in workflow.render(episode, workflow.agents[0], 0)[1]["content"]
    assert workflow.judge(episode).team == 1.0

    workflow, episode = one_turn(
        written_program("def add(a, b):\n    return a + b\n"), written_test("5", "5"), problem=problem
    )
    evidence = episode.turns[0].verifier["agents"]["tester_0"]
    assert (
        evidence.well_formed is False and evidence.reason == "call-based test input must be a JSON array of arguments"
    )


EXITS_AFTER_ANSWER = RIGHT + "import sys\nsys.exit(3)\n"
SPINS_AFTER_ANSWER = "a, b = map(int, input().split())\nprint(a + b, flush=True)\nwhile True:\n    pass\n"


@pytest.mark.parametrize("code", [EXITS_AFTER_ANSWER, SPINS_AFTER_ANSWER])
def test_a_failed_run_is_no_result_for_the_coder_the_tester_or_cure(code):
    """docs/method.md (failed runs): right output followed by a non-zero exit or a timeout passes no golden test,
    agrees with no test case, and makes no reference output for the Tester's check."""
    workflow, episode = one_turn(written_program(code), written_test("2 3", "5"), timeout=1.0)
    turn = episode.turns[0]
    assert not turn.agreed and turn.verifier["pairs"][0]["signature"] is None
    assert turn.verifier["agents"]["coder_0"].passed == 0
    assert workflow.judge(episode).local[0, "coder_0"].terms == {"build": 1.0, "run": 0.0, "pass": 0.0}
    matrix = run_matrix([code], [*GOLDEN, Case("2 3\n", "5\n")], timeout=1.0)
    assert matrix == [[0, 0, 0]]

    problem = dataclasses.replace(PROBLEM, reference_solution=code)
    workflow, episode = one_turn(written_program(RIGHT), written_test("2 3", "5"), problem=problem, timeout=1.0)
    tester = episode.turns[0].verifier["agents"]["tester_0"]
    assert tester.valid is False and tester.spec is False
    assert workflow.judge(episode).local[0, "tester_0"].value == 0.0
