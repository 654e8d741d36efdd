"""teacher.privileged=reference: token by token, the problem's reference is in every teacher context
(own role and contrast, with PAC's block, both layouts) and in no student context, for each workflow
whose rows carry a reference; the response keeps its positions; a row without one is counted."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.rollout.records import EpisodeResult, Sample
from verl_masopd.teacher.attribution import Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.metrics import step_metrics
from verl_masopd.teacher.privileged import HEADER
from verl_masopd.teacher.reference import REFERENCE_HEADER, reference_block
from verl_masopd.teacher.scoring import TeacherScoring, contrast_roles
from verl_masopd.tokens.context import ContextEncoder
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Action, Judgement, Turn
from verl_masopd.workflows.math import ReasonerEvidence, ToolUserEvidence
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case

MATH = Problem(uid="m1", domain="math", statement="What is 6 times 7?", answer="42")
CODE = Problem(
    uid="c1",
    domain="code",
    statement="Read n and print n + 1.",
    tests=(Case("1\n", "2\n"), Case("5\n", "6\n")),
    reference_solution="print(int(input()) + 1)",
)
QA = Problem(uid="q0", domain="qa", statement="Which river is the capital of Arland on?", answers=("Tol", "the Tol"))
REFERENCES = {
    "m1": "Reference answer: 42",
    "c1": "Reference solution:\n```python\nprint(int(input()) + 1)\n```",
    "q0": "Golden answers: Tol | the Tol",
}


def inserted_at(longer: list[int], shorter: list[int], extra: list[int]) -> int | None:
    """The position i with longer == shorter[:i] + extra + shorter[i:], None when there is none."""
    for i in range(len(shorter) + 1):
        if longer == shorter[:i] + extra + shorter[i:]:
            return i
    return None


def contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def workflows(index):
    return [
        (make_workflow("mas", "math", 1, 2), MATH),
        (make_workflow("mas", "code", 1, 2), CODE),
        (make_workflow("sa", "math", 1, 2), MATH),
        (make_workflow("sa", "code", 1, 2), CODE),
        (make_workflow("mas", "math", 2, 2), MATH),
        (make_workflow("search", "qa", 1, 8, retriever=index), QA),
    ]


@pytest.mark.parametrize("layout", ["role_first", "role_last"])
def test_the_reference_is_in_every_teacher_context_and_in_no_student_context(layout, tiny_tokenizer, toy_search_index):
    for workflow, problem in workflows(toy_search_index):
        block = reference_block(problem)
        assert block == f"{REFERENCE_HEADER}\n{REFERENCES[problem.uid]}"
        extra = tiny_tokenizer.encode(f"\n\n{block}", add_special_tokens=False)
        reference_ids = tiny_tokenizer.encode(REFERENCES[problem.uid], add_special_tokens=False)
        student = ContextEncoder(workflow, tiny_tokenizer, layout)
        plain = TeacherContextBuilder(workflow, tiny_tokenizer, 8192, layout=layout)
        privileged = TeacherContextBuilder(workflow, tiny_tokenizer, 8192, layout=layout, reference=True)
        episode = workflow.reset(problem)
        kappa = len(workflow.roles) - 1
        for agent in workflow.schedule(episode):
            u, _ = student.student(episode, agent, 0, None)
            assert not contains(u, reference_ids), (workflow.name, agent.name)
            assert REFERENCES[problem.uid] not in tiny_tokenizer.decode(u)
            for q in [agent.role, *contrast_roles(agent.role, workflow.roles, kappa)]:
                without = plain.build(episode, agent.name, 0, q, None, response_len=8)
                x = privileged.build(episode, agent.name, 0, q, None, response_len=8)
                assert x.reference and not without.reference and not x.privileged
                # x_q is the context without b with exactly b's tokens inserted, once
                assert inserted_at(x.ids, without.ids, extra) is not None, (workflow.name, agent.name, q, layout)
                assert tiny_tokenizer.decode(x.ids).count(REFERENCES[problem.uid]) == 1
                if q == agent.role:
                    assert without.ids == u  # x_r without b is exactly u


def conflict_episode(workflow):
    """Turn 0: the reasoner answers 41, the tool user 42 (a conflict); turn 1: both 42."""
    episode = workflow.reset(MATH)
    r, u = episode.agents

    def turn(index, answer, agreed):
        actions = {
            r.name: Action(r, f"#### {answer}", {"answer": answer}),
            u.name: Action(u, "```python\nprint(42)\n```", {"code": "print(42)"}),
        }
        ok = answer == "42"
        verifier = {
            "agents": {
                r.name: ReasonerEvidence(verdict=ok, answer=answer, correct=ok, reason=None),
                u.name: ToolUserEvidence(
                    verdict=True, run=True, output="42\n", failure=None, answer="42", correct=True
                ),
            }
        }
        report = "The answers agree." if agreed else f"reasoner_0's answer: {answer}\nThe answers disagree."
        return Turn(index, actions, report, agreed, verifier)

    episode.turns = [turn(0, "41", False), turn(1, "42", True)]
    episode.done = True
    return episode


class RecordingScorer:
    """A scorer that records every request and scores each response token −1."""

    def __init__(self):
        self.requests = []

    async def score(self, requests):
        self.requests += list(requests)
        return [[-1.0] * len(r.response_ids) for r in requests]


@pytest.mark.parametrize("reveal", [False, True])
async def test_the_reference_composes_with_pac_and_both_ras_passes(reveal, tiny_tokenizer):
    workflow = make_workflow("mas", "math", 1, 2)
    episode = conflict_episode(workflow)
    attributions = await Attributor(workflow).attribute({"e1": episode})
    a0 = attributions.previous("e1", 1)
    student = ContextEncoder(workflow, tiny_tokenizer)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, 8192, reveal_reference=reveal, reference=True)
    plain = TeacherContextBuilder(workflow, tiny_tokenizer, 8192)
    extra = tiny_tokenizer.encode(f"\n\n{reference_block(MATH)}", add_special_tokens=False)

    samples = []
    for t in (0, 1):
        agent = episode.agents[0]
        u, cut = student.student(episode, agent, t, None)
        response = tiny_tokenizer.encode(episode.turns[t].actions[agent.name].text, add_special_tokens=False)
        samples.append(
            Sample("e1", 0, t, agent.name, agent.role, 0, agent.role, u, response, [-0.5] * len(response), "stop")
        )
        samples[-1].generated = [1] * len(response)
    scorer = RecordingScorer()
    scoring = TeacherScoring(builder, scorer, num_contrast_roles=1)
    stats = await scoring.score([EpisodeResult("e1", episode, samples, Judgement(True, 1.0, "42"), 0)], attributions)

    # requests: pass 0 (own role) for turns 0, 1, then pass 1 (the tool user's condition) likewise
    assert len(scorer.requests) == 4
    for request, (t, q) in zip(scorer.requests, [(0, "reasoner"), (1, "reasoner"), (0, "tool_user"), (1, "tool_user")]):
        sample = samples[t]
        assert request.response_ids == sample.response_ids  # the response is never touched
        without = plain.build(episode, "reasoner_0", t, q, a0 if t else None, len(sample.response_ids))
        assert inserted_at(request.context_ids, without.ids, extra) is not None, (t, q)
        text = tiny_tokenizer.decode(request.context_ids)
        assert text.count("Reference answer: 42") == 1  # PAC's block does not repeat it
        assert (HEADER in text) == (t == 1)  # p_t after the conflict of turn 0, in both passes
        assert text.index(REFERENCE_HEADER) < (text.index(HEADER) if t else len(text))
        assert "Reference answer" not in tiny_tokenizer.decode(sample.prompt_ids)
        if q == "reasoner" and t == 0:
            assert without.ids == sample.prompt_ids
    assert [s.teacher.privileged for s in samples] == [False, True]
    assert stats.references == 2


async def test_a_problem_without_a_reference_gets_no_block_and_is_counted(tiny_tokenizer):
    workflow = make_workflow("mas", "code", 1, 2)
    bare = Problem(uid="c2", domain="code", statement="Print 1.", tests=(Case("", "1\n"),))
    assert reference_block(bare) is None
    builders = [TeacherContextBuilder(workflow, tiny_tokenizer, 8192, reference=flag) for flag in (False, True)]
    results = []
    for problem in (CODE, bare):
        episode = workflow.reset(problem)
        coder = episode.agents[0]
        u, _ = ContextEncoder(workflow, tiny_tokenizer).student(episode, coder, 0, None)
        sample = Sample(problem.uid, 0, 0, coder.name, coder.role, 0, coder.role, u, [5, 6, 7], [-1.0] * 3, "stop")
        sample.generated = [1, 1, 1]
        results.append(EpisodeResult(problem.uid, episode, [sample], Judgement(False, 0.0, None), 0))
    without, with_reference = (b.build(results[1].episode, "coder_0", 0, "coder", None, 3) for b in builders)
    assert with_reference.ids == without.ids and not with_reference.reference
    stats = await TeacherScoring(builders[1], RecordingScorer(), num_contrast_roles=1, pac_enable=False).score(results)
    assert (stats.responses, stats.references) == (2, 1)
    off = await TeacherScoring(builders[0], RecordingScorer(), num_contrast_roles=1, pac_enable=False).score(results)
    assert off.references is None
    assert "teacher/reference_share" not in _stats_metrics(off)
    assert _stats_metrics(stats)["teacher/reference_share"] == 0.5


def _stats_metrics(stats):
    """step_metrics on a batch without scored rows: its stats part alone."""
    empty = DataProto.from_dict(
        tensors={
            "response_mask": torch.zeros(1, 1),
            "teacher_log_probs": torch.zeros(1, 1),
            "rollout_log_probs": torch.zeros(1, 1),
        },
        non_tensors={
            "role": np.array(["coder"], dtype=object),
            "privileged": np.array([False], dtype=object),
            "teacher_scored": np.array([False], dtype=object),
            "turn": np.array([0], dtype=object),
        },
    )
    return step_metrics(empty, stats, None)
