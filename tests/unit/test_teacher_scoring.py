"""Teacher scoring of the records: one pass per role condition, scores on the exact response
positions, nothing on tool observations, the privileged flag, the counts; and the teacher metrics
on hand-made numbers."""

import math

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.workers.rollout.replica import TokenOutput

from verl_masopd.rollout.batch import teacher_tensors
from verl_masopd.rollout.records import EpisodeResult, Sample
from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
from verl_masopd.teacher.attribution import Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.metrics import role_metrics, step_metrics
from verl_masopd.teacher.scoring import ScoringStats, TeacherScoring
from verl_masopd.teacher.teachers import Teacher, Teachers
from verl_masopd.workflows.base import Action, Judgement, Turn
from verl_masopd.workflows.math import MathWorkflow, ReasonerEvidence, ToolUserEvidence
from verl_masopd.workflows.problem import Problem


def position_log_prob(position: int, token: int) -> float:
    """The stand-in teacher: log p(seq[j] | seq[:j]) = −(seq[j] + 0.5·j) / 100."""
    return -(token + 0.5 * position) / 100


def top_ids(position: int, k: int) -> list[int]:
    """The stand-in teacher's k most likely tokens at `position`, most likely first."""
    return [(position + t) % 50 for t in range(k)]


class StandInTeacherServer:
    """Prompt log-probs as verl's vLLM server returns them (rows 1..n−1, then a dummy row): with
    prompt_logprobs 0 the prompt's own token, with k the top k by rank (`top_ids`)."""

    def __init__(self):
        self.requests = 0
        self.topk_requests = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        k = sampling_params["prompt_logprobs"]
        assert sampling_params["max_tokens"] == 1
        self.requests += 1
        self.topk_requests += k > 0
        rows = range(1, len(prompt_ids))
        ids = [top_ids(j, k) for j in rows] if k else [[prompt_ids[j]] for j in rows]
        extra = {
            "prompt_logprobs": [[position_log_prob(j, i) for i in row] for j, row in zip(rows, ids)]
            + [[0.0] * max(k, 1)],
            "prompt_ids": ids + [[0] * max(k, 1)],
        }
        return TokenOutput(token_ids=[7], stop_reason="completed", extra_fields=extra)


def recorded_episode(workflow):
    """Turn 0: the reasoner is wrong, the tool user right (a conflict); turn 1: agreement."""
    episode = workflow.reset(Problem(uid="m1", domain="math", statement="What is 6 times 7?", answer="42"))
    r, u = episode.agents

    def turn(index, reasoner_text, reasoner_ok, agreed):
        actions = {
            r.name: Action(r, reasoner_text, {"answer": reasoner_text[-2:]}),
            u.name: Action(u, "```python\nprint(42)\n```", {"code": "print(42)"}),
        }
        verifier = {
            "agents": {
                r.name: ReasonerEvidence(
                    verdict=reasoner_ok, answer=reasoner_text[-2:], correct=reasoner_ok, reason=None
                ),
                u.name: ToolUserEvidence(
                    verdict=True, run=True, output="42\n", failure=None, answer="42", correct=True
                ),
            }
        }
        report = "The answers agree." if agreed else "reasoner_0's answer: 41\nThe answers disagree."
        return Turn(index, actions, report, agreed, verifier)

    episode.turns = [turn(0, "#### 41", False, False), turn(1, "#### 42", True, True)]
    episode.done = True
    return episode


def reasoner_record(episode, responses, generated=None):
    """The recorded reasoner samples of turns 0, 1, 1 (an empty response is a failed turn)."""
    generated = generated or [None] * len(responses)
    samples = [
        Sample(
            "e1",
            0,
            turn,
            "reasoner_0",
            "reasoner",
            0,
            "reasoner",
            [1, 2],
            ids,
            [-1.0] * len(ids),
            "stop" if ids else "failed",
            generated=g or [],
        )
        for turn, ids, g in zip([0, 1, 1], responses, generated)
    ]
    return EpisodeResult("e1", episode, samples, Judgement(True, 1.0, "42"), 0)


async def test_scoring_places_each_role_condition_on_the_response_positions(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    attributions = await Attributor(workflow).attribute({"e1": episode})
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    server = StandInTeacherServer()
    scoring = TeacherScoring(builder, ServerTeacherScorer(server), num_contrast_roles=1)
    record = reasoner_record(episode, [[10, 11, 12], [13, 14], []])
    stats = await scoring.score([record], attributions)

    a0 = attributions.previous("e1", 1)
    lengths = {}
    for turn, response in ((0, [10, 11, 12]), (1, [13, 14])):
        for q in ("reasoner", "tool_user"):
            lengths[turn, q] = len(
                builder.build(episode, "reasoner_0", turn, q, a0 if turn else None, len(response)).ids
            )
    for sample, (turn, response) in zip(record.samples, ((0, [10, 11, 12]), (1, [13, 14]))):
        for q, row in (("reasoner", sample.teacher.log_probs), ("tool_user", sample.teacher.contrast[0])):
            c = lengths[turn, q]
            assert row == pytest.approx([position_log_prob(c + i, y) for i, y in enumerate(response)])
    # the tool user's instruction has another length than the reasoner's: the two passes differ
    assert lengths[0, "reasoner"] != lengths[0, "tool_user"]
    assert record.samples[2].teacher is None
    assert [s.teacher.privileged for s in record.samples[:2]] == [False, True]
    # two responses, two passes: 4 requests, and every token of them counted
    assert server.requests == 4
    assert stats.responses == 2 and stats.passes == 2 and stats.truncations == 0
    assert stats.teacher_tokens == sum(lengths.values()) + 2 * (3 + 2)
    assert 0 < stats.shared_prefix_tokens < lengths[0, "reasoner"] + lengths[1, "reasoner"]


async def test_tool_observations_are_context_for_the_teacher_but_never_scored(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    scoring = TeacherScoring(builder, ServerTeacherScorer(StandInTeacherServer()), num_contrast_roles=1)
    # generated 10, observation 11 12, generated 13
    record = reasoner_record(episode, [[10, 11, 12, 13]], [[1, 0, 0, 1]])
    await scoring.score([record])
    c = len(builder.build(episode, "reasoner_0", 0, "reasoner", None, 4).ids)
    expected = [position_log_prob(c, 10), 0.0, 0.0, position_log_prob(c + 3, 13)]
    assert record.samples[0].teacher.log_probs == pytest.approx(expected)
    assert record.samples[0].teacher.contrast[0][1:3] == [0.0, 0.0]


async def test_topk_scoring_keeps_the_own_role_top_k_on_generated_tokens(tiny_tokenizer):
    """topk: the own-role pass also asks for the top k (a second request per response), the
    contrast pass stays sampled-token; observation rows are 0; the batch carries [B, R, k]."""
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    server = StandInTeacherServer()
    scoring = TeacherScoring(builder, ServerTeacherScorer(server), num_contrast_roles=1, topk=3)
    record = reasoner_record(episode, [[10, 11, 12, 13]], [[1, 0, 0, 1]])
    await scoring.score([record])

    teacher = record.samples[0].teacher
    c = len(builder.build(episode, "reasoner_0", 0, "reasoner", None, 4).ids)
    assert teacher.topk_ids == [top_ids(c, 3), [0, 0, 0], [0, 0, 0], top_ids(c + 3, 3)]
    assert teacher.topk_log_probs[0] == pytest.approx([position_log_prob(c, i) for i in top_ids(c, 3)])
    assert teacher.topk_log_probs[1] == [0.0, 0.0, 0.0]
    assert teacher.log_probs == pytest.approx([position_log_prob(c, 10), 0.0, 0.0, position_log_prob(c + 3, 13)])
    assert (server.requests, server.topk_requests) == (3, 1)
    tensors = teacher_tensors(record.samples[:1], width=5)
    assert tensors["teacher_topk_ids"].shape == (1, 5, 3) and tensors["teacher_topk_ids"].dtype == torch.int64
    assert tensors["teacher_topk_ids"][0, 3].tolist() == top_ids(c + 3, 3)
    assert tensors["teacher_topk_log_probs"][0, 4].abs().sum() == 0


async def test_scoring_cuts_responses_to_the_batch_length(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    scoring = TeacherScoring(builder, ServerTeacherScorer(StandInTeacherServer()), num_contrast_roles=0)
    record = reasoner_record(episode, [[10, 11, 12]])
    await scoring.score([record], max_response_len=2)
    assert len(record.samples[0].teacher.log_probs) == 2 and record.samples[0].teacher.contrast == []


async def test_opd_scoring_has_no_contrast_pass_and_pac_off_has_no_block(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    attributions = await Attributor(workflow).attribute({"e1": episode})
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    server = StandInTeacherServer()
    scoring = TeacherScoring(builder, ServerTeacherScorer(server), num_contrast_roles=0, pac_enable=False)
    record = reasoner_record(episode, [[10], [13, 14]])
    stats = await scoring.score([record], attributions)
    assert server.requests == 2 and stats.passes == 1
    assert [s.teacher.contrast for s in record.samples] == [[], []]
    assert [s.teacher.privileged for s in record.samples] == [False, False]


def hand_made_batch():
    """Two reasoner rows (3 response tokens) and one tool-user row (3 tokens), scored by the
    teacher, and a fourth row of a role it did not score (its teacher scores are 0)."""
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]]),
            "teacher_log_probs": torch.tensor([[-1.0, -2, 0], [-3, 0, 0], [-1, -1, -1], [0, 0, 0]]),
            "teacher_contrast_log_probs": torch.tensor([[[-2.0, -2, 0]], [[-1, 0, 0]], [[-1, -2, -3]], [[0, 0, 0]]]),
            "rollout_log_probs": torch.tensor([[-1.5, -1, 0], [-2, 0, 0], [-2, -2, -2], [-5, -5, -5]]),
        },
        non_tensors={
            "role": np.array(["reasoner", "reasoner", "tool_user", "leader"], dtype=object),
            "teacher_scored": np.array([True, True, True, False], dtype=object),
            "privileged": np.array([True, False, False, False], dtype=object),
            "turn": np.array([0, 1, 0, 2], dtype=object),
        },
    )


STATS = ScoringStats(
    responses=3,
    passes=2,
    teacher_tokens=60,
    shared_prefix_tokens=6,
    computed_tokens=54,
    truncations=1,
    truncated_tokens=9,
)


def test_role_metrics_by_hand():
    metrics = role_metrics(hand_made_batch())
    # reasoner tokens: Δ = 1, 0, −2 → −1/3; ℓS − ℓT = −0.5, 1, 1 → 0.5; one of two turns privileged
    assert metrics["teacher/reasoner/role_advantage"] == pytest.approx(-1 / 3)
    assert metrics["teacher/reasoner/reverse_kl"] == pytest.approx(0.5)
    assert metrics["teacher/reasoner/privileged_share"] == pytest.approx(0.5)
    # tool user: Δ = 0, 1, 2 → 1; ℓS − ℓT = −1 each
    assert metrics["teacher/tool_user/role_advantage"] == pytest.approx(1.0)
    assert metrics["teacher/tool_user/reverse_kl"] == pytest.approx(-1.0)
    assert metrics["teacher/tool_user/privileged_share"] == 0.0
    # turn 0: ℓS − ℓT = −0.5, 1 (reasoner) and −1, −1, −1 (tool user) → −2.5 / 5; turn 1: 1 / 1
    assert metrics["teacher/turn_0/reverse_kl"] == pytest.approx(-0.5)
    assert metrics["teacher/turn_1/reverse_kl"] == pytest.approx(1.0)
    # the unscored row counts nowhere
    assert not any("leader" in key or "turn_2" in key for key in metrics)


async def test_step_metrics_count_tokens_and_attribution(tiny_tokenizer):
    workflow = MathWorkflow()
    attributions = await Attributor(workflow).attribute({"e1": recorded_episode(workflow)})
    metrics = step_metrics(hand_made_batch(), STATS, attributions)
    assert metrics["teacher/tokens_per_response"] == pytest.approx(60 / 3)
    assert metrics["teacher/computed_tokens_per_response"] == pytest.approx(54 / 3)
    assert metrics["teacher/truncations"] == 1.0 and metrics["teacher/truncated_tokens"] == 9.0
    assert metrics["teacher/reasoner/reverse_kl"] == pytest.approx(0.5)
    assert metrics["teacher/attribution_fallbacks"] == 0.0 and metrics["teacher/attribution_unavailable"] == 0.0


async def test_only_the_roles_given_are_scored(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    server = StandInTeacherServer()
    scoring = TeacherScoring(builder, ServerTeacherScorer(server), num_contrast_roles=0, roles=["tool_user"])
    record = reasoner_record(episode, [[10], [13, 14]])
    stats = await scoring.score([record])
    assert server.requests == 0 and stats.responses == 0
    assert [s.teacher for s in record.samples] == [None, None]


class OffsetTeacherServer:
    """A stand-in teacher whose log-prob of every token is position_log_prob − offset."""

    def __init__(self, offset: float):
        self.offset = offset
        self.requests = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests += 1
        rows = range(1, len(prompt_ids))
        extra = {
            "prompt_logprobs": [[position_log_prob(j, prompt_ids[j]) - self.offset] for j in rows] + [[0.0]],
            "prompt_ids": [[prompt_ids[j]] for j in rows] + [[0]],
        }
        return TokenOutput(token_ids=[7], stop_reason="completed", extra_fields=extra)


def two_teachers(weighting="fixed", route_by="data_source", keys=(None, None)):
    entries = (Teacher("strong", "/m/strong", keys[0], 3.0), Teacher("weak", "/m/weak", keys[1], 1.0))
    return Teachers(entries, route_by, weighting, 1.0)


@pytest.mark.parametrize("weighting", ["fixed", "confidence"])
async def test_scoring_writes_the_weighted_sum_of_both_teachers_passes(weighting, tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    servers = [OffsetTeacherServer(0.0), OffsetTeacherServer(1.0)]
    chosen = two_teachers(weighting)
    scoring = TeacherScoring(builder, [ServerTeacherScorer(s) for s in servers], 1, teachers=chosen)
    record = reasoner_record(episode, [[10, 11, 12]])
    stats = await scoring.score([record])

    c = len(builder.build(episode, "reasoner_0", 0, "reasoner", None, 3).ids)
    strong = [position_log_prob(c + i, y) for i, y in enumerate([10, 11, 12])]
    alpha = chosen.weights([0, 1], [strong, [x - 1.0 for x in strong]], [1, 1, 1])
    assert alpha == ([0.75, 0.25] if weighting == "fixed" else pytest.approx([math.e / (math.e + 1), 1 / (math.e + 1)]))
    expected = [alpha[0] * x + alpha[1] * (x - 1.0) for x in strong]
    assert record.samples[0].teacher.log_probs == pytest.approx(expected)
    assert stats.weights == {"strong": [pytest.approx(alpha[0])], "weak": [pytest.approx(alpha[1])]}
    assert [s.requests for s in servers] == [2, 2]  # own role and contrast, each teacher


async def test_routing_by_role_sends_each_role_to_its_teacher(tiny_tokenizer):
    workflow = MathWorkflow()
    episode = recorded_episode(workflow)
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, max_length=4096)
    servers = [OffsetTeacherServer(0.0), OffsetTeacherServer(1.0)]
    routed = two_teachers(route_by="role", keys=("tool_user", "reasoner"))
    scoring = TeacherScoring(builder, [ServerTeacherScorer(s) for s in servers], 1, teachers=routed)
    record = reasoner_record(episode, [[10, 11]])
    stats = await scoring.score([record])
    c = len(builder.build(episode, "reasoner_0", 0, "reasoner", None, 2).ids)
    assert record.samples[0].teacher.log_probs == pytest.approx(
        [position_log_prob(c + i, y) - 1.0 for i, y in enumerate([10, 11])]
    )
    assert [s.requests for s in servers] == [0, 2] and stats.weights == {"weak": [1.0]}
