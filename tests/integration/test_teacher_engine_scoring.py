"""Teacher scoring on verl's real engine (forward-only, CPU) equals a plain transformers forward of
each unpadded teacher sequence x_q + y, on the response positions, for contexts of any length; the
shared-prefix path equals the packed pass."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.rollout.records import EpisodeResult, Sample
from verl_masopd.teacher.attribution import Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.teacher.judging import JudgeScoring, approval
from verl_masopd.teacher.scoring import ScoreRequest, TeacherScoring
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Action, Judgement, Turn
from verl_masopd.workflows.math import MathWorkflow, ReasonerEvidence, ToolUserEvidence
from verl_masopd.workflows.problem import Problem

pytestmark = pytest.mark.integration


def transformers_response_log_probs(model, request: ScoreRequest) -> list[float]:
    """log p(y_i | x_q, y_<i) from one unpadded forward: logits row |x_q| − 1 + i scores y_i."""
    seq = torch.tensor([request.context_ids + request.response_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=seq).logits.float()[0], dim=-1)
    start = len(request.context_ids) - 1
    return [log_probs[start + i, y].item() for i, y in enumerate(request.response_ids)]


async def test_engine_scores_equal_transformers_forward(tiny_teacher_path, tiny_tokenizer):
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(teacher, pad_id=tiny_tokenizer.pad_token_id)
    short = encode_messages(tiny_tokenizer, [{"role": "user", "content": "What is 6 times 7?"}])
    long = encode_messages(
        tiny_tokenizer,
        [
            {"role": "system", "content": "You are the tester. Write test cases with input and expected output."},
            {"role": "user", "content": "Problem: sum the values.\n\n[Privileged feedback] The coder should revise."},
        ],
    )
    response = tiny_tokenizer.encode("The answer is 42.", add_special_tokens=False)
    requests = [ScoreRequest(short, response), ScoreRequest(long, response), ScoreRequest(long, response[:3])]
    assert len(long) > len(short) + 10

    scores = await scorer.score(requests)

    model = AutoModelForCausalLM.from_pretrained(tiny_teacher_path, attn_implementation="sdpa")
    for request, got in zip(requests, scores, strict=True):
        assert len(got) == len(request.response_ids)
        torch.testing.assert_close(
            torch.tensor(got), torch.tensor(transformers_response_log_probs(model, request)), atol=1e-4, rtol=0
        )
    # the same response after another context gets other teacher scores
    assert max(abs(a - b) for a, b in zip(scores[0], scores[1])) > 1e-3


@pytest.mark.parametrize("share", [False, True])
async def test_topk_scores_are_the_full_forwards_top_k(share, tiny_teacher_path, tiny_tokenizer):
    """score_topk on the packed path (shared prefix or not): per response position the k most
    likely tokens of a plain transformers forward, their log-probs, and the sampled token's."""
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(teacher, pad_id=tiny_tokenizer.pad_token_id, share_prefix=share)
    context = encode_messages(tiny_tokenizer, [{"role": "user", "content": "What is 6 times 7?"}])
    other = encode_messages(tiny_tokenizer, [{"role": "user", "content": "What is 6 times 7? Check it."}])
    response = tiny_tokenizer.encode("The answer is 42.", add_special_tokens=False)
    requests = [ScoreRequest(context, response), ScoreRequest(other, response)]

    scores = await scorer.score_topk(requests, 8)

    model = AutoModelForCausalLM.from_pretrained(tiny_teacher_path, attn_implementation="sdpa")
    for request, got in zip(requests, scores, strict=True):
        seq = torch.tensor([request.context_ids + request.response_ids])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(input_ids=seq).logits.float()[0], dim=-1)
        rows = log_probs[len(request.context_ids) - 1 : -1]
        top = rows.topk(8, dim=-1)
        assert got.ids == top.indices.tolist()
        torch.testing.assert_close(torch.tensor(got.top_log_probs), top.values, atol=1e-4, rtol=0)
        torch.testing.assert_close(
            torch.tensor(got.log_probs),
            torch.tensor(transformers_response_log_probs(model, request)),
            atol=1e-4,
            rtol=0,
        )
    assert scorer.computed_tokens > 0


async def test_shared_prefix_scoring_equals_full_recomputation_for_both_roles(tiny_teacher_path, tiny_tokenizer):
    """RAS under role_last with privileged blocks: the engine's shared-prefix path returns the packed
    pass's log-probs (own role and contrast) while running fewer tokens."""
    workflow = MathWorkflow(agents_per_role=1)
    episodes = {}
    for k in range(1):
        episode = workflow.reset(
            Problem(uid=f"p{k}", domain="math", statement=f"What is {k} times 7?", answer=str(7 * k))
        )
        actions = {a.name: Action(a, f"#### {7 * k + (a.role == 'reasoner')}") for a in workflow.agents}
        wrong, right = str(7 * k + 1), str(7 * k)
        reasoner = ReasonerEvidence(verdict=False, answer=wrong, correct=False, reason=None)
        tool_user = ToolUserEvidence(
            verdict=True, run=True, output=f"{right}\n", failure=None, answer=right, correct=True
        )
        verifier = {"agents": {a.name: reasoner if a.role == "reasoner" else tool_user for a in workflow.agents}}
        episode.turns.append(Turn(0, actions, "The answers disagree.", False, verifier))
        episode.turns.append(Turn(1, actions, "The answers disagree.", False, verifier))
        episode.done = True
        episodes[f"e{k}"] = episode
    attributions = await Attributor(workflow).attribute(episodes)
    rows = [(eid, t, a) for eid in episodes for t in (0, 1) for a in workflow.agents]
    generator = torch.Generator().manual_seed(0)
    responses = torch.randint(3, len(tiny_tokenizer), (len(rows), 6), generator=generator)
    lengths = [6 if i % 3 else 4 for i in range(len(rows))]
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    builder = TeacherContextBuilder(workflow, tiny_tokenizer, 4096, layout="role_last")
    out = {}
    for share in (False, True):
        results = [
            EpisodeResult(
                eid,
                episode,
                [
                    Sample(
                        eid,
                        0,
                        t,
                        a.name,
                        a.role,
                        0,
                        a.role,
                        [1],
                        responses[i, : lengths[i]].tolist(),
                        [-1.0] * lengths[i],
                        "stop",
                    )
                    for i, (e, t, a) in enumerate(rows)
                    if e == eid
                ],
                Judgement(False, 0.0, None),
                0,
            )
            for eid, episode in episodes.items()
        ]
        scorer = EngineTeacherScorer(teacher, pad_id=tiny_tokenizer.pad_token_id, share_prefix=share)
        stats = await TeacherScoring(builder, scorer, num_contrast_roles=1).score(results, attributions)
        out[share] = ([s.teacher for r in results for s in r.samples], stats)
    (full, stats_full), (shared, stats_shared) = out[False], out[True]
    assert sum(t.privileged for t in shared) == 2  # turn 1 carries p_t
    for f, sh in zip(full, shared, strict=True):
        torch.testing.assert_close(torch.tensor(sh.log_probs), torch.tensor(f.log_probs), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(sh.contrast), torch.tensor(f.contrast), atol=1e-4, rtol=0)
    assert stats_full.computed_tokens == stats_full.teacher_tokens == stats_shared.teacher_tokens
    # each response's shared prefix (observation and p_t) ran once instead of twice
    assert stats_shared.shared_prefix_tokens > 0
    assert stats_shared.computed_tokens == stats_full.teacher_tokens - stats_shared.shared_prefix_tokens


@pytest.mark.parametrize("share", [False, True])
async def test_the_judges_score_is_the_verdicts_probability_under_a_transformers_forward(
    share, tiny_teacher_path, tiny_tokenizer, toy_search_index
):
    """JudgeScoring on the engine scorer (both verdicts of every reply in one call, the
    shared-prefix path grouping them by verdict) gives σ(ℓ_yes − ℓ_no) of plain forwards."""
    workflow = make_workflow("search", "qa", 1, 4, retriever=toy_search_index, max_waves=1)
    episode = workflow.reset(
        Problem(uid="q", domain="qa", statement="What is the capital of Arland?", answers=("Bex",))
    )
    leader = workflow.schedule(episode)[0]
    workflow.step(
        episode, {leader.name: workflow.parse(leader, "<subtask>capital of Arland</subtask><subtask>Arland</subtask>")}
    )
    found = "<information>Doc 1(Title: Arland) the capital is Bex.</information>"
    replies = [f"<search>Arland capital</search>{found}<summary>Bex</summary>", "<summary>Mir</summary>"]
    searchers = workflow.schedule(episode)
    workflow.step(episode, {a.name: workflow.parse(a, r) for a, r in zip(searchers, replies, strict=True)})
    samples = [Sample("e", 0, 1, a.name, a.role, a.index, "shared", [1], [1], [0.0], "stop") for a in searchers]
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(teacher, pad_id=tiny_tokenizer.pad_token_id, share_prefix=share)
    judging = JudgeScoring(workflow, tiny_tokenizer, scorer, 1024, ["searcher"])
    stats = await judging.score([EpisodeResult("e", episode, samples, None, 0)])

    model = AutoModelForCausalLM.from_pretrained(tiny_teacher_path, attn_implementation="sdpa")
    assert stats.judged == 2
    for agent, sample in zip(searchers, samples, strict=True):
        context = encode_messages(tiny_tokenizer, workflow.critique(episode, agent, 1))
        yes, no = (
            sum(
                transformers_response_log_probs(
                    model, ScoreRequest(context, tiny_tokenizer.encode(v, add_special_tokens=False))
                )
            )
            for v in ("yes", "no")
        )
        assert sample.judge == pytest.approx(approval(yes, no), abs=1e-4)
    assert samples[0].judge != pytest.approx(samples[1].judge, abs=1e-3)
