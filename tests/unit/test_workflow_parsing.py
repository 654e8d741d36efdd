"""Parsing of untrusted model output, majority choice, reward weights and the workflow factory."""

import operator

import pytest

from verl_masopd.workflows import make_workflow, workflow_class
from verl_masopd.workflows.base import Agent
from verl_masopd.workflows.code import CoderEvidence, parse_test_case
from verl_masopd.workflows.code import TesterEvidence as CaseEvidence  # a Test* name pytest would collect
from verl_masopd.workflows.consensus import majority
from verl_masopd.workflows.math import ReasonerEvidence, ToolUserEvidence, parse_answer
from verl_masopd.workflows.parsing import MAX_RESPONSE_CHARS, fenced_blocks, shown, unusable_reason
from verl_masopd.workflows.prompted import parse_program

CODER = Agent("coder_0", "coder", 0)
TESTER = Agent("tester_0", "tester", 0)
REASONER = Agent("reasoner_0", "reasoner", 0)


def test_last_python_block_is_the_program():
    text = "First try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    action = parse_program(CODER, text)
    assert action.error is None
    assert action.fields == {"code": "print(2)"}


def test_untagged_and_other_blocks_are_not_programs():
    action = parse_program(CODER, "```\nprint(1)\n```\n```text\nprint(2)\n```")
    assert action.fields == {}
    assert action.error == "no ```python block"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("   \n\t ", "empty output"),
        ("Here is my program:\n```python\nimport sys\nfor line in sys.stdin:", "truncated output"),
        ("```python\n\n```", "empty ```python block"),
        ("I think the answer is obvious.", "no ```python block"),
        ("```python\nprint(1)\x00\n```", "binary output (control character 0x00)"),
        ("\x1b[31m```python\nprint(1)\n```", "binary output (control character 0x1b)"),
        ("```python\n" + "x = 1\n" * (MAX_RESPONSE_CHARS // 6 + 1) + "```", "output too long"),
        (b"print(1)", "output is not text (bytes)"),
    ],
)
def test_bad_program_outputs_are_recorded_reasons(text, reason):
    action = parse_program(CODER, text)
    assert action.fields == {}
    assert action.error.startswith(reason)


def test_truncated_block_after_a_complete_one_is_still_truncated():
    text = "```python\nprint(1)\n```\nActually:\n```python\nprint(2"
    assert parse_program(CODER, text).error.startswith("truncated output")


def test_fenced_blocks_keep_tags_bodies_and_closure():
    blocks = fenced_blocks("a\n```Input\n1 2\n```\n  ```output extra\n3\n```\n```python\nx")
    assert [(b.tag, b.body, b.closed) for b in blocks] == [
        ("input", "1 2", True),
        ("output", "3", True),
        ("python", "x", False),
    ]


def test_test_case_parses_last_input_and_output_blocks():
    text = "```input\n1 1\n```\n```output\n2\n```\nBetter:\n```input\n2 3\n```\n```output\n5\n```"
    action = parse_test_case(TESTER, text)
    assert action.error is None
    assert action.fields == {"test_input": "2 3", "test_output": "5"}


def test_test_case_without_expected_output_keeps_its_input_and_a_reason():
    action = parse_test_case(TESTER, "```input\n2 3\n```\nThe output should be five.")
    assert action.fields == {"test_input": "2 3"}
    assert action.error == "expected output: no ```output block"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("```output\n5\n```", "test input: no ```input block"),
        ("```input\n2 3\n```\n```output\n\n```", "expected output: empty ```output block"),
        ("```input\n2 3\n```\n```output\n5", "expected output: truncated output"),
        ("\x07```input\n2 3\n```", "binary output (control character 0x07)"),
    ],
)
def test_bad_test_cases_are_recorded_reasons(text, reason):
    assert parse_test_case(TESTER, text).error.startswith(reason)


def test_answer_after_hash_marker_and_missing_marker():
    assert parse_answer(REASONER, "2 + 2 = 4, so\n#### 4").fields == {"answer": "4"}
    missing = parse_answer(REASONER, "The answer is 4.")
    assert missing.fields == {} and missing.error == "no '#### <answer>' line"
    assert parse_answer(REASONER, "").error == "empty output"


def test_shown_clips_and_replaces_control_characters():
    assert shown("a\x00b", 10) == "a?b"
    assert shown("abcdef", 4) == "abcd\n... [2 more characters]"


def test_unusable_reason_accepts_ordinary_text():
    assert unusable_reason("Answer:\t42\r\n") is None


def test_majority_largest_class_then_lowest_index():
    assert majority([("a0", 1), ("a1", 2), ("a2", 2)], operator.eq) == "a1"
    assert majority([("a0", 1), ("a1", 2)], operator.eq) == "a0"
    assert majority([("a0", 1), ("a1", 2), ("a2", 1), ("a3", 2)], operator.eq) == "a0"
    assert majority([], operator.eq) is None


def test_reward_weights_default_override_and_unknown_keys():
    assert make_workflow("mas", "code").weights == {
        "coder": {"build": 0.1, "run": 0.1, "pass": 0.8},
        "tester": {"valid": 0.2, "spec": 0.8},
    }
    assert make_workflow("mas", "math").weights == {
        "reasoner": {"format": 0.2, "answer": 0.8},
        "tool_user": {"run": 0.1, "parse": 0.1, "answer": 0.8},
    }
    assert make_workflow("sa", "math").weights == {"reasoner": {"format": 0.2, "answer": 0.8}}
    weights = make_workflow("mas", "code", reward_weights={"coder": {"pass": 1.0}}).weights
    assert weights["coder"] == {"build": 0.1, "run": 0.1, "pass": 1.0}
    assert CoderEvidence.WEIGHTS["pass"] == 0.8
    with pytest.raises(
        ValueError, match=r"workflow.reward_weights: unknown role 'critic' \(known: \['coder', 'tester'\]\)"
    ):
        make_workflow("mas", "code", reward_weights={"critic": {"x": 1.0}})
    with pytest.raises(ValueError, match=r"workflow.reward_weights: unknown role 'tester' \(known: \['coder'\]\)"):
        make_workflow("sa", "code", reward_weights={"tester": {"spec": 1.0}})
    with pytest.raises(
        ValueError, match=r"workflow.reward_weights.tester.speed: unknown term \(known: \['spec', 'valid'\]\)"
    ):
        make_workflow("mas", "code", reward_weights={"tester": {"speed": 1.0}})


def test_local_reward_weighted_sum_and_mask():
    tool_user = ToolUserEvidence(verdict=False, run=True, output="7\n", failure=None, answer="7", correct=False)
    reward = tool_user.reward(ToolUserEvidence.WEIGHTS)
    assert reward.mask and reward.terms == {"run": 1.0, "parse": 1.0, "answer": 0.0}
    assert reward.value == pytest.approx(0.2)
    coder = CoderEvidence(verdict=False, build=True, run=False, passed=2, total=4, reason=None, visible_outputs=())
    assert coder.reward({"build": 0.1, "run": 0.1, "pass": 0.8}).value == pytest.approx(0.5)
    assert coder.reward({"build": 0.0, "run": 0.5, "pass": 1.0}).terms == {"build": 1.0, "run": 0.0, "pass": 0.5}
    tester = CaseEvidence(verdict=False, well_formed=True, valid=True, spec=False, reason="wrong output")
    assert tester.reward(CaseEvidence.WEIGHTS).value == pytest.approx(0.2)
    masked = ReasonerEvidence(verdict=None, answer="7", correct=None, reason=None).reward(ReasonerEvidence.WEIGHTS)
    assert (masked.value, masked.mask, masked.terms) == (0.0, False, {})


def test_make_workflow_builds_each_system():
    assert make_workflow("mas", "code").roles == ("coder", "tester")
    assert make_workflow("mas", "math").roles == ("reasoner", "tool_user")
    single = make_workflow("sa", "code", horizon=1)
    assert (single.name, single.domain, single.roles, single.horizon) == ("sa", "code", ("coder",), 1)
    assert make_workflow("sa", "math").roles == ("reasoner",)
    many = make_workflow("mas", "math", agents_per_role=2, timeout=5.0)
    assert [a.name for a in many.agents] == ["reasoner_0", "reasoner_1", "tool_user_0", "tool_user_1"]
    assert many.timeout == 5.0
    assert workflow_class("mas", "code").default_timeout == 30.0
    assert workflow_class("mas", "math").default_timeout == 20.0


def test_make_workflow_rejects_unknown_names_domains_and_options():
    with pytest.raises(ValueError, match="unknown workflow 'debate'"):
        make_workflow("debate", "code")
    with pytest.raises(ValueError, match="unknown domain 'chess'"):
        make_workflow("mas", "chess")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['smoke_tests'\]"):
        make_workflow("mas", "math", smoke_tests=2)
    with pytest.raises(ValueError, match="agents_per_role must be >= 1"):
        make_workflow("mas", "code", agents_per_role=0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        make_workflow("sa", "math", timeout=0)
    with pytest.raises(ValueError, match=r"workflow.float_tol must be in \[0, 1\) or null"):
        make_workflow("mas", "code", float_tol=-1e-6)
    assert make_workflow("sa", "code").float_tol == 1e-6
    assert make_workflow("mas", "code", float_tol=None).float_tol is None
