"""The teacher as a judge (teacher/judging.py): the score σ(ℓ_yes − ℓ_no) by hand, on Searcher
replies of a search episode played by the real rollout manager on scripted replies with a real
BM25 index; other roles and failed turns are not judged; long contexts lose their middle."""

from __future__ import annotations

import asyncio
import math

import pytest

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import FAILED, STOP
from verl_masopd.teacher.judging import JudgeScoring, approval, middle_cut
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem

QUESTION = Problem(uid="q0", domain="qa", statement="What is the capital of Arland?", answers=("Bex",))


class Scripted:
    """A Leader that sends two subtasks then hands over, Searchers that search once and report
    (the first one the capital, the second a wrong city), and an Answerer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            reply = text.rsplit("<|im_start|>assistant", 1)[1]
            if "You are the Leader" in text:
                done = "## Reports" in text and "Bex" in text.split("## Reports")[1]
                answer = (
                    "<select>1</select>" if done else "<subtask>capital of Arland</subtask><subtask>Arland</subtask>"
                )
            elif "You are a Searcher" in text:
                first = "Subtask\ncapital of Arland" in text
                searched = "<information>" in reply
                answer = (
                    ("<summary>Bex</summary>" if first else "<summary>Mir</summary>")
                    if searched
                    else "<search>Arland capital</search>"
                )
            else:
                answer = "<answer>Bex</answer>"
            ends = [answer.find(s) + len(s) for s in sampling.stop if s in answer]
            ids = self.tokenizer.encode(answer[: min(ends)] if ends else answer, add_special_tokens=False)
            ids = ids if ends else ids + [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), STOP))
        return out


class FakeJudge:
    """Per-token log-probs of a verdict: approval of a reply reporting Bex is likelier."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.yes = tokenizer.encode("yes", add_special_tokens=False)
        self.calls = []

    async def score(self, requests):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            right = "<summary>Bex</summary>" in self.tokenizer.decode(r.context_ids)
            favoured = (r.response_ids == self.yes) == right
            out.append([-0.5, -0.25] if favoured else [-1.0, -1.0])
        return out


def play(tokenizer, workflow):
    backend = Scripted(tokenizer)
    with RolloutManager(
        workflow, {r: backend for r in workflow.roles}, tokenizer, sampling=SamplingParams(max_new_tokens=120)
    ) as manager:
        [group] = asyncio.run(manager.run([QUESTION], 1))
    return group.episodes


def test_approval_and_middle_cut_by_hand():
    assert approval(-0.75, -2.0) == pytest.approx(1 / (1 + math.exp(-1.25)))
    assert approval(-2.0, -0.75) == pytest.approx(0.2227001388)
    assert approval(0.0, -1000.0) == 1.0 and approval(-1000.0, 0.0) == 0.0  # no overflow
    assert middle_cut(list(range(10)), 5) == ([0, 1, 7, 8, 9], 5)
    assert middle_cut([1, 2], 5) == ([1, 2], 0)


def test_searcher_replies_are_judged_by_the_verdicts_log_probs(tiny_tokenizer, toy_search_index):
    workflow = make_workflow("search", "qa", 1, 4, retriever=toy_search_index, max_waves=1)
    results = play(tiny_tokenizer, workflow)
    judge = FakeJudge(tiny_tokenizer)
    stats = asyncio.run(JudgeScoring(workflow, tiny_tokenizer, judge, 4096, ["searcher"]).score(results))

    searchers = [s for s in results[0].samples if s.role == "searcher"]
    assert len(searchers) == 2 and stats.judged == 2
    # ℓ_yes = −0.75, ℓ_no = −2 for the right report; the reverse for the wrong one
    assert [s.judge for s in searchers] == pytest.approx([0.7772998611, 0.2227001388])
    assert all(s.judge is None for s in results[0].samples if s.role != "searcher")
    [requests] = judge.calls
    assert [r.response_ids for r in requests] == [judge.yes, tiny_tokenizer.encode("no", add_special_tokens=False)] * 2
    context = tiny_tokenizer.decode(requests[0].context_ids)
    assert "You judge the work of a Searcher" in context and "capital of Arland" in context
    assert "<information>" in context  # the passages the Searcher read are in the judge's context
    assert stats.metrics()["judge/searcher/score"] == pytest.approx(0.5)
    assert stats.truncations == 0


def test_failed_turns_are_not_judged_and_long_contexts_lose_their_middle(tiny_tokenizer, toy_search_index):
    workflow = make_workflow("search", "qa", 1, 4, retriever=toy_search_index, max_waves=1)
    results = play(tiny_tokenizer, workflow)
    first, second = [s for s in results[0].samples if s.role == "searcher"]
    second.finish_reason = FAILED
    judge = FakeJudge(tiny_tokenizer)
    stats = asyncio.run(JudgeScoring(workflow, tiny_tokenizer, judge, 64, ["searcher"]).score(results))
    assert stats.judged == 1 and second.judge is None and first.judge is not None
    assert stats.truncations == 1
    assert all(len(r.context_ids) == 64 - 2 for r in judge.calls[0])


def test_a_role_the_workflow_does_not_judge_is_refused(tiny_tokenizer, toy_search_index):
    workflow = make_workflow("search", "qa", 1, 4, retriever=toy_search_index, max_waves=1)
    with pytest.raises(ValueError, match="no reply of role 'leader'"):
        JudgeScoring(workflow, tiny_tokenizer, FakeJudge(tiny_tokenizer), 4096, ["leader"])
