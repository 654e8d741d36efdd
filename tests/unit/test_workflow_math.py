"""The Reasoner–Tool-User workflow with real programs in the real sandbox and real math-verify:
agreement, reports, rewards, attribution, n > 1 and bad outputs."""

import dataclasses

import pytest

from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import HOLD, REVISE
from verl_masopd.workflows.math import REASONER_INSTRUCTION, TOOL_USER_INSTRUCTION
from verl_masopd.workflows.problem import Problem

PROBLEM = Problem(uid="half", domain="math", statement="What is 3 divided by 6?", answer="\\frac{1}{2}")


def reasoning(answer: str) -> str:
    return f"Dividing 3 by 6 gives the answer.\n#### {answer}"


def program(code: str) -> str:
    return f"I compute it.\n```python\n{code}\n```"


def play(workflow, turns, problem=PROBLEM):
    episode = workflow.reset(problem)
    for texts in turns:
        workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    return episode


def one_turn(reasoner_text, tool_text, problem=PROBLEM, **options):
    workflow = make_workflow("mas", "math", timeout=10.0, **options)
    return workflow, play(workflow, [{"reasoner_0": reasoner_text, "tool_user_0": tool_text}], problem)


def test_equivalent_answers_agree_and_score_full_rewards():
    workflow, episode = one_turn(reasoning("1/2"), program("print(3 / 6)"))
    turn = episode.turns[0]
    assert turn.agreed and episode.done
    assert "reasoner_0's answer: 1/2" in turn.report and "```output\n0.5\n```" in turn.report
    judgement = workflow.judge(episode)
    assert judgement.correct and judgement.team == 1.0 and judgement.submission == "1/2"
    assert judgement.local[0, "reasoner_0"].terms == {"format": 1.0, "answer": 1.0}
    assert judgement.local[0, "tool_user_0"].terms == {"run": 1.0, "parse": 1.0, "answer": 1.0}
    assert judgement.local[0, "tool_user_0"].value == pytest.approx(1.0)
    assert workflow.attribute(episode, 0) is None


def test_only_tool_user_wrong():
    workflow, episode = one_turn(reasoning("0.5"), program("print(6 / 3)"))
    turn = episode.turns[0]
    assert not turn.agreed and not episode.done
    assert "Answer read from it: 2.0" in turn.report and "The answers disagree." in turn.report
    attribution = workflow.attribute(episode, 0)
    assert attribution.verdicts == {"reasoner_0": True, "tool_user_0": False}
    assert attribution.decisions == {"reasoner_0": HOLD, "tool_user_0": REVISE}
    judgement = workflow.judge(episode)
    assert judgement.local[0, "tool_user_0"].value == pytest.approx(0.1 + 0.1)
    assert judgement.team == 1.0 and judgement.submission == "0.5"


def test_only_reasoner_wrong_and_both_wrong():
    workflow, episode = one_turn(reasoning("2"), program("print(3 / 6)"))
    assert workflow.attribute(episode, 0).decisions == {"reasoner_0": REVISE, "tool_user_0": HOLD}
    judgement = workflow.judge(episode)
    assert judgement.local[0, "reasoner_0"].terms == {"format": 1.0, "answer": 0.0}
    assert judgement.local[0, "reasoner_0"].value == pytest.approx(0.2)
    assert judgement.team == 0.0 and not judgement.correct

    workflow, episode = one_turn(reasoning("2"), program("print(3)"))
    assert workflow.attribute(episode, 0).decisions == {"reasoner_0": REVISE, "tool_user_0": REVISE}


def test_failing_program_still_leaves_the_reasoner_answer():
    workflow, episode = one_turn(reasoning("1/2"), program("print(1 / 0)"))
    turn = episode.turns[0]
    assert "tool_user_0's program failed: exit code 1: ZeroDivisionError: division by zero" in turn.report
    assert "tool_user_0's program printed nothing." in turn.report
    judgement = workflow.judge(episode)
    assert judgement.local[0, "tool_user_0"].terms == {"run": 0.0, "parse": 0.0, "answer": 0.0}
    assert judgement.submission == "1/2" and judgement.team == 1.0


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("import sys\nprint('1/2')\nsys.exit(3)", "exit code 3"),
        ("print('1/2', flush=True)\nwhile True:\n    pass", "timeout after 1.0s"),
        ("print('1/2', flush=True)\nraise RuntimeError('late')", "exit code 1: RuntimeError: late"),
    ],
)
def test_a_failed_run_gives_no_answer_whatever_it_printed(code, why):
    """docs/method.md (failed runs): the answer printed before a non-zero exit, a timeout or a crash is no answer:
    no parse or answer credit and no agreement with a Reasoner giving the same answer."""
    workflow = make_workflow("mas", "math", timeout=1.0)
    episode = play(workflow, [{"reasoner_0": reasoning("1/2"), "tool_user_0": program(code)}])
    turn = episode.turns[0]
    assert not turn.agreed and turn.verifier["pairs"][0]["agree"] is False
    evidence = turn.verifier["agents"]["tool_user_0"]
    assert evidence.answer is None and evidence.correct is False and evidence.failure.startswith(why)
    assert f"tool_user_0's program failed: {why}" in turn.report and "A failed run gives no answer." in turn.report
    reward = workflow.judge(episode).local[0, "tool_user_0"]
    assert reward.terms == {"run": 0.0, "parse": 0.0, "answer": 0.0} and reward.value == 0.0


def test_program_printing_nothing_runs_but_gives_no_answer():
    workflow, episode = one_turn(reasoning("1/2"), program("x = 3 / 6"))
    assert "tool_user_0's program printed nothing." in episode.turns[0].report
    assert "No answer could be read from its output." in episode.turns[0].report
    reward = workflow.judge(episode).local[0, "tool_user_0"]
    assert reward.terms == {"run": 1.0, "parse": 0.0, "answer": 0.0} and reward.value == pytest.approx(0.1)


def test_bad_outputs_become_recorded_outcomes():
    workflow, episode = one_turn("The answer is one half.", "Let me think\x00")
    turn = episode.turns[0]
    assert "reasoner_0 gave no answer: no '#### <answer>' line." in turn.report
    assert "tool_user_0 gave no program to run: binary output" in turn.report
    judgement = workflow.judge(episode)
    assert judgement.local[0, "reasoner_0"].mask and judgement.local[0, "reasoner_0"].value == 0.0
    assert judgement.local[0, "tool_user_0"].mask and judgement.local[0, "tool_user_0"].value == 0.0
    assert judgement.submission is None and judgement.team == 0.0
    assert workflow.attribute(episode, 0).decisions == {"reasoner_0": REVISE, "tool_user_0": REVISE}

    workflow, episode = one_turn("", "```python\nprint(1/2")
    assert "reasoner_0 gave no answer: empty output." in episode.turns[0].report
    assert "tool_user_0 gave no program to run: truncated output" in episode.turns[0].report


def test_without_reference_answer_rewards_are_masked_and_verdicts_unknown():
    problem = dataclasses.replace(PROBLEM, answer=None)
    workflow, episode = one_turn(reasoning("1/2"), program("print(2)"), problem=problem)
    judgement = workflow.judge(episode)
    assert not judgement.local[0, "reasoner_0"].mask and not judgement.local[0, "tool_user_0"].mask
    attribution = workflow.attribute(episode, 0)
    assert attribution.verdicts == {"reasoner_0": None, "tool_user_0": None}
    assert attribution.decisions == {} and not attribution.complete


def test_prompts_show_both_answers_and_role_condition_swaps_the_instruction():
    workflow, episode = one_turn(reasoning("2"), program("print(3 / 6)"))
    tool_user = workflow.agents[1]
    first = workflow.render(episode, tool_user, 0)
    assert first == [
        {"role": "system", "content": TOOL_USER_INSTRUCTION},
        {"role": "user", "content": "## Problem\nWhat is 3 divided by 6?"},
    ]
    second = workflow.render(episode, tool_user, 1)
    assert "print(3 / 6)" in second[1]["content"] and "#### 2" in second[1]["content"]
    assert "reasoner_0's answer: 2" in second[1]["content"]
    as_reasoner = workflow.render(episode, tool_user, 1, role="reasoner")
    assert as_reasoner[0]["content"] == REASONER_INSTRUCTION and as_reasoner[1] == second[1]


def test_horizon_and_agreement_on_a_later_turn():
    workflow = make_workflow("mas", "math", timeout=10.0, horizon=3)
    episode = play(
        workflow,
        [
            {"reasoner_0": reasoning("2"), "tool_user_0": program("print(3 / 6)")},
            {"reasoner_0": reasoning("1/2"), "tool_user_0": program("print(3 / 6)")},
        ],
    )
    assert [t.agreed for t in episode.turns] == [False, True] and episode.done
    judgement = workflow.judge(episode)
    assert judgement.team == 1.0 and set(judgement.local) == {
        (t, n) for t in (0, 1) for n in ("reasoner_0", "tool_user_0")
    }

    workflow = make_workflow("mas", "math", timeout=10.0, horizon=1)
    episode = play(workflow, [{"reasoner_0": reasoning("2"), "tool_user_0": program("print(3 / 6)")}])
    assert episode.done and not episode.turns[0].agreed


def test_n_agents_agreement_and_majority_submission():
    workflow = make_workflow("mas", "math", agents_per_role=3, timeout=10.0)
    texts = {"reasoner_0": reasoning("2"), "reasoner_1": reasoning("1/2"), "reasoner_2": reasoning("0.5")}
    texts |= {f"tool_user_{i}": program("print(3 / 6)") for i in range(3)}
    episode = play(workflow, [texts])
    assert not episode.turns[0].agreed
    judgement = workflow.judge(episode)
    assert judgement.submission == "1/2" and judgement.team == 1.0
    attribution = workflow.attribute(episode, 0)
    assert attribution.decisions == {
        "reasoner_0": REVISE,
        "reasoner_1": HOLD,
        "reasoner_2": HOLD,
        "tool_user_0": HOLD,
        "tool_user_1": HOLD,
        "tool_user_2": HOLD,
    }

    workflow = make_workflow("mas", "math", agents_per_role=2, timeout=10.0)
    texts = {
        "reasoner_0": reasoning("2"),
        "reasoner_1": reasoning("1/2"),
        "tool_user_0": program("print(3 / 6)"),
        "tool_user_1": program("print(1 / 2)"),
    }
    judgement = workflow.judge(play(workflow, [texts]))
    assert judgement.submission == "2" and judgement.team == 0.0

    texts["reasoner_0"] = reasoning("0.5")
    episode = play(workflow, [texts])
    assert episode.turns[0].agreed and len(episode.turns[0].verifier["pairs"]) == 4


def test_reward_weights_option_reweights_the_local_reward():
    workflow, episode = one_turn(reasoning("0.5"), program("print(6 / 3)"), reward_weights={"tool_user": {"run": 0.5}})
    assert workflow.judge(episode).local[0, "tool_user_0"].value == pytest.approx(0.5 * 1 + 0.1 * 1 + 0.8 * 0)
