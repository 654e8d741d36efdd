"""A run the sandbox itself failed to carry out (`ExecResult.infrastructure_failure`) is never
scored as the program's failure: no answer, no verdict, reward terms masked; golden runs lost
that way count in neither the Coder's passed nor total."""

from verl_masopd.sandbox import ExecResult, run_many
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Action, Agent
from verl_masopd.workflows.code import CoderEvidence, coder_evidence
from verl_masopd.workflows.math import ToolUserEvidence, tool_user_evidence
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case

LOST = ExecResult("40\n", "", None, False, 0.0, "sandbox failure: the run's supervisor did not report", False, True)
MATH = Problem(uid="forty", domain="math", statement="What is 8 times 5?", answer="40")
SUM = "print(sum(map(int, input().split())))\n"
CODE = Problem(
    uid="sum",
    domain="code",
    statement="Print the sum of the numbers on one line.",
    tests=(Case("1 2\n", "3\n"), Case("4 5\n", "9\n"), Case("7 7\n", "14\n")),
    reference_solution=SUM,
)


def action(role: str, **fields) -> Action:
    return Action(Agent(f"{role}_0", role, 0), "", fields, None)


def test_a_lost_tool_user_run_gives_no_answer_no_verdict_and_a_masked_reward():
    evidence = tool_user_evidence(action("tool_user", code="print(40)"), LOST, MATH, 100)
    assert evidence.answer is None and evidence.correct is None and evidence.verdict is None
    assert evidence.failure.startswith("sandbox failure")
    reward = evidence.reward(ToolUserEvidence.WEIGHTS)
    assert not reward.mask and reward.value == 0.0
    (clean,) = run_many([("print(40)", "")], timeout=10.0)
    scored = tool_user_evidence(action("tool_user", code="print(40)"), clean, MATH, 100).reward(
        ToolUserEvidence.WEIGHTS
    )
    assert scored.mask and scored.value == 1.0


def test_lost_golden_runs_count_in_neither_passed_nor_total():
    runs = run_many([(SUM, t.input) for t in CODE.tests], timeout=10.0)
    coder = action("coder", code=SUM)
    full = coder_evidence(CODE, coder, runs, [], 1, 1e-6)
    assert (full.passed, full.total, full.verdict) == (3, 3, True)
    partly_lost = coder_evidence(CODE, coder, [runs[0], LOST, runs[2]], [], 1, 1e-6)
    assert (partly_lost.passed, partly_lost.total, partly_lost.verdict) == (2, 2, True)
    all_lost = coder_evidence(CODE, coder, [LOST] * 3, [], 1, 1e-6)
    assert all_lost.total == 0 and all_lost.verdict is None
    assert not all_lost.reward(CoderEvidence.WEIGHTS).mask


def test_a_lost_reference_run_leaves_the_testers_case_unjudged():
    workflow = make_workflow("mas", "code", 1, 2, timeout=10.0)
    case = Case("1 2\n", "3\n")
    runs = run_many([(SUM, case.input)] * 2, timeout=10.0)
    judged = workflow._tester_evidence(CODE, case, None, runs)
    assert (judged.valid, judged.spec, judged.verdict) == (True, True, True)
    assert judged.reward(workflow.weights["tester"]).mask
    for lost in ([runs[0], LOST], [LOST, LOST]):
        unjudged = workflow._tester_evidence(CODE, case, None, lost)
        assert (unjudged.valid, unjudged.spec, unjudged.verdict) == (None, None, None)
        assert unjudged.reason == "the sandbox failed to run the reference solution"
        assert not unjudged.reward(workflow.weights["tester"]).mask
