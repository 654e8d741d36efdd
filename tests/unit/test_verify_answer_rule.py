"""Per-problem answer checking (OlympiadBench's judge): the `error` tolerance, ordered items,
items paired in any order with counts kept, and the rule read from a row's metadata."""

import json

import pytest

from verl_masopd.verify.answer_rule import AnswerRule, answer_matches, split_items
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem

ORDERED, MULTISET = AnswerRule("ordered"), AnswerRule("multiset")


@pytest.mark.parametrize(
    "answer, gold, rule, expected",
    [
        ("4.25", "4.2", AnswerRule("ordered", 0.1), True),
        ("4.25", "4.2", AnswerRule(), False),
        ("4.35", "4.2", AnswerRule("ordered", 0.1), False),
        ("\\frac{21}{5}", "4.2", AnswerRule("ordered", 0.1), True),
        ("16,3,1,1", "1,1,3,16", ORDERED, False),
        ("1,1,3,16", "1,1,3,16", ORDERED, True),
        ("1, 1, 3, \\frac{32}{2}", "1,1,3,16", ORDERED, True),
        ("-2", "-2,-2", MULTISET, False),
        ("-2,-2", "-2,-2", MULTISET, True),
        ("84, 69", "69,84", MULTISET, True),
        ("69, 69", "69,84", MULTISET, False),
        ("(9,3),(6,3),(54,5),(9,5)", "(6,3),(9,3),(9,5),(54,5)", MULTISET, True),
        ("(3,9),(6,3),(54,5),(9,5)", "(6,3),(9,3),(9,5),(54,5)", MULTISET, False),
        ("(-\\infty,-5)", "(-\\infty,-5)", ORDERED, True),
    ],
)
def test_answer_matches(answer, gold, rule, expected):
    assert answer_matches(answer, gold, rule) is expected


def test_the_default_rule_keeps_math_verify_reading():
    """Without a rule, "1, 2" is the set {1, 2}, as before (AIME, Polaris, built-in data)."""
    assert answer_matches("16,3,1,1", "1,1,3,16", AnswerRule()) is True


def test_split_items_keeps_brackets_whole():
    assert split_items("(0,4], \\{1, 2\\}, [3,4)") == ["(0,4]", "\\{1, 2\\}", "[3,4)"]


def test_bad_rules_are_named():
    with pytest.raises(ValueError, match="answer_rule.items"):
        AnswerRule("sorted")
    with pytest.raises(ValueError, match="answer_rule.tolerance"):
        AnswerRule("ordered", -1.0)


def row(metadata) -> dict:
    return {
        "ability": "math",
        "reward_model": {"ground_truth": "4.2"},
        "extra_info": {"id": "2592", "problem": "Find x.", "metadata": json.dumps(metadata)},
    }


def test_the_rule_reaches_the_reasoner_verdict_from_the_row():
    problem = Problem.from_row(row({"error": "1e-1", "answer_rule": {"items": "ordered", "tolerance": 0.1}}))
    assert problem.answer_rule == AnswerRule("ordered", 0.1)
    workflow = make_workflow("sa", "math", horizon=1)
    episode = workflow.reset(problem)
    workflow.step(episode, {"reasoner_0": workflow.parse(workflow.agents[0], "x is about\n#### 4.25")})
    assert episode.turns[0].verifier["agents"]["reasoner_0"].correct is True
    assert Problem.from_row(row({})).answer_rule == AnswerRule()
    with pytest.raises(ValueError, match="row 2592: extra_info.metadata: answer_rule"):
        Problem.from_row(row({"answer_rule": {"items": "sorted"}}))
