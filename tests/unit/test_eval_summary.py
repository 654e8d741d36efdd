"""The evaluation summary on hand-built records: existing keys and the collaboration metrics."""

import math

import pytest

from verl_masopd.rollout.summary import summarize


def turn(index, agreed, verdicts, code, tests):
    return {
        "turn": index,
        "agreed": agreed,
        "verdicts": verdicts,
        "parsed": {"coder_0": {"code": code}, "tester_0": {"test_input": tests, "test_output": "1"}},
    }


SEATS = {"coder_0": {"role": "coder", "index": 0}, "tester_0": {"role": "tester", "index": 0}}


def episode(correct, turns):
    return {"agents": SEATS, "correct": correct, "num_turns": len(turns), "failed_generations": 0, "turns": turns}


# Agreed at its third turn. t=0: coder at fault revises (a->b), tester correct holds.
# t=1: coder correct holds (b), tester at fault keeps its tests (does not revise).
AGREED_AT_2 = episode(
    True,
    [
        turn(0, False, {"coder_0": False, "tester_0": True}, "a", "x"),
        turn(1, False, {"coder_0": True, "tester_0": False}, "b", "x"),
        turn(2, True, None, "b", "x"),
    ],
)
# Never agreed. t=0: coder at fault keeps "c", tester unverifiable (None, not counted).
# t=1 is the last turn: its verdicts have no next turn and are not counted.
NEVER_AGREED = episode(
    False,
    [
        turn(0, False, {"coder_0": False, "tester_0": None}, "c", "y"),
        turn(1, False, {"coder_0": False, "tester_0": True}, "c", "z"),
    ],
)
# A conflict without attribution (verdicts None) counts for nothing; agreed at its second turn.
UNATTRIBUTED = episode(
    True,
    [turn(0, False, None, "d", "w"), turn(1, True, None, "e", "v")],
)
AGREED_AT_0 = episode(True, [turn(0, True, None, "f", "u")])


def test_collaboration_metrics_from_hand_built_records():
    records = [{"episodes": [AGREED_AT_2, NEVER_AGREED]}, {"episodes": [UNATTRIBUTED, AGREED_AT_0]}]
    row = summarize(records, horizon=3)
    assert row["problems"] == 2 and row["episodes"] == 4
    assert row["accuracy"] == 0.75
    assert row["avg_turns"] == (3 + 2 + 2 + 1) / 4
    assert row["agreement@0"] == 1 / 4 and row["agreement@1"] == 1 / 3 and row["agreement@2"] == 1.0
    assert row["agreed_share"] == 3 / 4
    assert row["turns_to_agreement"] == pytest.approx((3 + 2 + 1) / 3)
    # at fault: coder t=0 ep1 revised, tester t=1 ep1 did not, coder t=0 ep2 did not -> 1/3
    assert row["revise_rate_at_fault"] == pytest.approx(1 / 3)
    # correct: tester t=0 ep1 held, coder t=1 ep1 held -> 2/2
    assert row["hold_rate_correct"] == 1.0


def test_metrics_without_cases_are_nan():
    row = summarize([{"episodes": [NEVER_AGREED]}], horizon=2)
    assert row["agreed_share"] == 0.0
    assert math.isnan(row["turns_to_agreement"])
    assert row["revise_rate_at_fault"] == 0.0
    assert math.isnan(row["hold_rate_correct"])

    row = summarize([{"episodes": [AGREED_AT_0]}], horizon=2)
    assert row["agreed_share"] == 1.0 and row["turns_to_agreement"] == 1.0
    assert math.isnan(row["revise_rate_at_fault"]) and math.isnan(row["hold_rate_correct"])
    assert math.isnan(row["agreement@1"])


def test_a_single_agent_has_no_agreement():
    """SA+ST / SA+MT: agreement metrics are missing (NaN), never 0; accuracy and turns are kept."""
    alone = {**NEVER_AGREED, "agents": {"coder_0": SEATS["coder_0"]}}
    row = summarize([{"episodes": [alone]}], horizon=2)
    assert row["accuracy"] == 0.0 and row["avg_turns"] == 2
    for key in ("agreement@0", "agreement@1", "agreed_share", "turns_to_agreement"):
        assert math.isnan(row[key]), key


def test_a_workflow_that_does_not_agree_has_no_agreement():
    """The search team (`Workflow.agrees` False): agreement metrics NaN though two agents play."""
    row = summarize([{"episodes": [NEVER_AGREED, AGREED_AT_0]}], horizon=2, agreement=False)
    assert row["accuracy"] == 0.5 and row["avg_turns"] == 1.5
    for key in ("agreement@0", "agreement@1", "agreed_share", "turns_to_agreement"):
        assert math.isnan(row[key]), key
