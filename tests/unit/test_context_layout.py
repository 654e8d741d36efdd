"""The context layout and the one truncation rule: the student's u and the teacher's x_r agree (x_r
without the privileged block is u) in both layouts, with and without truncation; truncation takes
history tokens only; under role_last all role conditions share the observation as a prefix."""

import os

import pytest

from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.privileged import HEADER
from verl_masopd.tokens.context import ContextEncoder, Cut, arrange, fit, history_span
from verl_masopd.workflows.base import Action, Turn
from verl_masopd.workflows.math import MathWorkflow, ReasonerEvidence, ToolUserEvidence
from verl_masopd.workflows.problem import Problem

STATEMENT = "What is 6 times 7 plus the number of primes below 20?"


def episode_with_history(workflow: MathWorkflow, words: int):
    """Turn 0 a conflict (reasoner wrong, tool user right) with long outputs, so turn 1 has a long history."""
    episode = workflow.reset(Problem(uid="p", domain="math", statement=STATEMENT, answer="50"))
    actions = {
        a.name: Action(a, " ".join(["step"] * words) + (" #### 49" if a.role == "reasoner" else " print(50)"))
        for a in workflow.agents
    }
    reasoner = ReasonerEvidence(verdict=False, answer="49", correct=False, reason=None)
    tool_user = ToolUserEvidence(verdict=True, run=True, output="50\n", failure=None, answer="50", correct=True)
    verifier = {"agents": {a.name: reasoner if a.role == "reasoner" else tool_user for a in workflow.agents}}
    episode.turns.append(Turn(0, actions, "The answers disagree: 49 against 50.", False, verifier))
    return episode


def covers(teacher: list[int], student: list[int]) -> bool:
    """`teacher` is `student` with one block of tokens inserted."""
    head = len(os.path.commonprefix([teacher, student]))
    tail = len(os.path.commonprefix([teacher[::-1], student[::-1]]))
    return head + tail >= len(student) and len(teacher) > len(student)


def test_arrange_puts_the_role_condition_first_or_last():
    rendered = [{"role": "system", "content": "You are the coder."}, {"role": "user", "content": "## Problem\nx"}]
    first = arrange(rendered, "role_first", "BLOCK")
    last = arrange(rendered, "role_last", "BLOCK")
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"] == "## Problem\nx\n\nBLOCK"
    assert last == [first[1], first[0]]
    assert arrange(rendered, "role_last") == [rendered[1], rendered[0]]
    with pytest.raises(ValueError, match="workflow.context_layout='middle'"):
        arrange(rendered, "middle")


def test_role_last_under_a_default_system_template_sends_the_role_condition_as_a_user_message():
    rendered = [{"role": "system", "content": "You are the coder."}, {"role": "user", "content": "## Problem\nx"}]
    last = arrange(rendered, "role_last", "BLOCK", default_system=True)
    assert last == [
        {"role": "user", "content": "## Problem\nx\n\nBLOCK"},
        {"role": "user", "content": "You are the coder."},
    ]
    assert arrange(rendered, "role_first", default_system=True) == rendered


def test_history_span_and_fit():
    base = [1, 2, 3, 8, 9]
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert history_span(ids, base) == (3, 7)
    assert fit(ids, (3, 7), 9) == Cut()
    assert fit(ids, (3, 7), 7) == Cut(1, 2)  # 2 of the 4 history tokens, from the middle
    assert fit(ids, (3, 7), 8, at_least=Cut(0, 3)) == Cut(0, 3)  # the student's cut is kept as it is
    assert fit(ids, (3, 7), 3) == Cut(1, 6, overflow=True)  # head and tail alone exceed the budget


@pytest.mark.parametrize("layout", ["role_first", "role_last"])
@pytest.mark.parametrize("budget", [None, 600])
def test_teacher_own_role_context_is_the_students_context(tiny_tokenizer, layout, budget):
    workflow = MathWorkflow(agents_per_role=1)
    episode = episode_with_history(workflow, words=300)
    manager = RolloutManager(
        workflow, {"reasoner": None, "tool_user": None}, tiny_tokenizer, max_prompt_len=budget, context_layout=layout
    )
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, 4096, layout=layout)
    with manager:
        for agent in workflow.agents:
            u, cut = manager.context(episode, agent, 1)
            plain = builder.build(episode, agent.name, 1, agent.role, None, 10, cut)
            assert plain.ids == u and not plain.privileged
            attribution = workflow.attribute(episode, 0)
            privileged = builder.build(episode, agent.name, 1, agent.role, attribution, 10, cut)
            assert privileged.privileged and covers(privileged.ids, u)
            assert HEADER in tiny_tokenizer.decode(privileged.ids) and HEADER not in tiny_tokenizer.decode(u)
            text = tiny_tokenizer.decode(u)
            assert workflow.instructions[agent.role] in text and STATEMENT in text
            if budget is None:
                assert plain.cut_tokens == 0 and len(u) > 600
            else:
                assert len(u) == budget and plain.cut_tokens > 0 and "step" in text
    assert manager.metrics.truncated_prompts == (0 if budget is None else 2)


def test_teacher_cuts_more_history_only_when_its_own_budget_requires(tiny_tokenizer):
    workflow = MathWorkflow(agents_per_role=1)
    episode = episode_with_history(workflow, words=300)
    agent = workflow.agents[0]
    student_ids, student_cut = ContextEncoder(workflow, tiny_tokenizer, "role_last").student(episode, agent, 1, 700)
    roomy = TeacherContextBuilder(workflow, tiny_tokenizer, 4096, layout="role_last")
    tight = TeacherContextBuilder(workflow, tiny_tokenizer, 610, layout="role_last")
    assert roomy.build(episode, agent.name, 1, agent.role, None, 10, student_cut).ids == student_ids
    short = tight.build(episode, agent.name, 1, agent.role, None, 10, student_cut)
    assert len(short.ids) == 600 and short.cut_tokens > student_cut.count
    text = tiny_tokenizer.decode(short.ids)
    assert workflow.instructions[agent.role] in text and STATEMENT in text and "49 against 50" in text


def test_role_last_shares_the_observation_across_role_conditions(tiny_tokenizer):
    workflow = MathWorkflow(agents_per_role=1)
    episode = episode_with_history(workflow, words=50)
    attribution = workflow.attribute(episode, 0)
    agent = workflow.agents[0]
    shared = {}
    for layout in ("role_first", "role_last"):
        builder = TeacherContextBuilder(workflow, tiny_tokenizer, 4096, layout=layout)
        own, other = (builder.build(episode, agent.name, 1, q, attribution, 10).ids for q in workflow.roles)
        shared[layout] = len(os.path.commonprefix([own, other])) / len(own)
    assert shared["role_first"] < 0.05 and shared["role_last"] > 0.5
