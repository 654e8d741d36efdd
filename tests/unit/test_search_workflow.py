"""The search team (workflows/search.py) played by the real rollout manager on scripted replies, with
a real BM25 index: the schedule of waves, the Searchers' calls with their passages masked token by
token, the Answerer's candidates and their rewards, and every malformed output as an outcome."""

from __future__ import annotations

import asyncio

import pytest

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import STOP
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.search import NO_CANDIDATE, NO_SUMMARY, UNTAGGED, SearchWorkflow, reports
from verl_masopd.workflows.tools import OVER_BUDGET

QUESTION = Problem(uid="q0", domain="qa", statement="Which river is the capital of Arland on?", answers=("Tol",))


@pytest.fixture
def index(toy_search_index):
    return toy_search_index


class Scripted:
    """Replies chosen by `script(prompt text, call number)`; generation stops after the first of
    `sampling.stop` the reply contains, as vLLM and the HF backend do."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.calls = 0

    async def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            self.calls += 1
            text = self.script(self.tokenizer.decode(prompt), self.calls)
            ends = [text.find(s) + len(s) for s in sampling.stop if s in text]
            text = text[: min(ends)] if ends else text
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if not ends:
                ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [-0.5] * len(ids), STOP))
        return out


def team(prompt: str, call: int) -> str:
    """Two waves: the capital, then its river; hand both reports over; candidates alternate
    between right and wrong, starting right."""
    reply = prompt.rsplit("<|im_start|>assistant", 1)[1]
    if "You are the Leader" in prompt:
        if "2 of 3 sent" in prompt or "1 of 3 sent" in prompt and "river" in prompt.split("## Reports")[1]:
            return "<select>1, 2, 7</select>"
        if "1 of 3 sent" in prompt:
            return "<subtask>river of Bex</subtask>"
        return "Find the capital first. <subtask>capital of Arland</subtask>"
    if "You are a Searcher" in prompt:
        first = "Subtask\ncapital of Arland" in prompt
        if "<information>" not in reply:
            return "<search>Arland capital</search>" if first else "<search>Bex river</search>"
        return "<summary>the capital is Bex</summary>" if first else "<summary>Bex is on the Tol</summary>"
    answers = team.answers = getattr(team, "answers", 0) + 1
    return "<answer>the Tol</answer>" if answers % 2 else "<answer>Mir</answer>"


def play(tokenizer, workflow, script, problem=QUESTION, group_size=1):
    team.answers = 0
    backend = Scripted(tokenizer, script)
    policies = {role: backend for role in workflow.roles}
    with RolloutManager(workflow, policies, tokenizer, sampling=SamplingParams(max_new_tokens=200)) as manager:
        [group] = asyncio.run(manager.run([problem], group_size))
        return group, manager.metrics


def make(index, **options):
    return make_workflow("search", "qa", 1, 2 * options.get("max_waves", 3) + 2, retriever=index, **options)


def test_two_waves_a_handover_and_four_candidates(tiny_tokenizer, index):
    workflow = make(index)
    group, metrics = play(tiny_tokenizer, workflow, team)
    [result] = group.episodes
    episode = result.episode
    assert [sorted(t.actions) for t in episode.turns] == [
        ["leader_0"],
        ["searcher_0"],
        ["leader_0"],
        ["searcher_1"],
        ["leader_0"],
        ["answerer_0", "answerer_1", "answerer_2", "answerer_3"],
    ]
    assert reports(episode.turns) == [
        ("capital of Arland", "the capital is Bex"),
        ("river of Bex", "Bex is on the Tol"),
    ]
    handover = episode.turns[4].verifier["agents"]["leader_0"]
    assert (handover.decision, handover.selected, handover.invalid) == ("handover", (1, 2), 1)
    # the Answerer sees both reports, renumbered; the Leader saw the first one before the second wave
    answerer_context = workflow.render(episode, episode.agent("answerer_0"), 5)[1]["content"]
    assert "1 (capital of Arland) the capital is Bex\n2 (river of Bex) Bex is on the Tol" in answerer_context
    assert "Bex is on the Tol" not in workflow.render(episode, episode.agent("leader_0"), 2)[1]["content"]
    # the Searcher sees its subtask only
    assert workflow.render(episode, episode.agent("searcher_1"), 3)[1]["content"] == "## Subtask\nriver of Bex"
    j = result.judgement
    assert (j.submission, j.team, j.correct) == ("the Tol", 1.0, True)
    rewards = {name: j.local[(5, name)].value for name in episode.turns[5].actions}
    assert sorted(rewards.values()) == [0.0, 0.0, 1.0, 1.0] and rewards["answerer_0"] == 1.0
    assert not j.local[(0, "leader_0")].mask and not j.local[(1, "searcher_0")].mask
    assert metrics.tool_calls == 2 and metrics.tool_outcomes["ok"] == 2


def test_equal_queries_of_a_step_are_searched_once_and_the_hit_rate_logged(tiny_tokenizer, index):
    workflow = make(index)
    team.answers = 0
    backend = Scripted(tiny_tokenizer, team)
    policies = {role: backend for role in workflow.roles}
    with RolloutManager(workflow, policies, tiny_tokenizer, sampling=SamplingParams(max_new_tokens=200)) as manager:
        manager.begin_step()
        asyncio.run(manager.run([QUESTION], 2))  # two episodes of one question: the same two searches each
        assert manager.metrics.tool_outcomes["ok"] == 4
        metrics = manager.tool_metrics()
        assert metrics == {
            "tool/search/cache_lookups": 4,
            "tool/search/cache_hits": 2,
            "tool/search/cache_hit_rate": 0.5,
        }
        manager.begin_step()
        assert manager.tool_metrics()["tool/search/cache_lookups"] == 0 and manager.metrics.tool_calls == 0


def test_passages_are_masked_token_by_token(tiny_tokenizer, index):
    workflow = make(index)
    group, _ = play(tiny_tokenizer, workflow, team)
    [result] = group.episodes
    searcher = next(s for s in result.samples if s.agent == "searcher_0")
    query = tiny_tokenizer.encode("<search>Arland capital</search>", add_special_tokens=False)
    [found] = workflow.search_tool.retriever.search(["Arland capital"])
    observation = tiny_tokenizer.encode(
        f"\n\n<information>{found.observation}</information>\n\n", add_special_tokens=False
    )
    summary = tiny_tokenizer.encode("<summary>the capital is Bex</summary>", add_special_tokens=False)
    eos = [tiny_tokenizer.eos_token_id]
    assert found.passages[0].id == "0"
    assert searcher.response_ids == query + observation + summary + eos
    assert searcher.generated == [1] * len(query) + [0] * len(observation) + [1] * len(summary + eos)
    assert [u.outcome for u in searcher.tool_calls] == ["ok"]
    assert searcher.tool_calls[0].observation_tokens == len(observation)
    batch = to_dataproto([group], None, 512, 256, tiny_tokenizer.pad_token_id)
    row = list(batch.non_tensor_batch["agent"]).index("searcher_0")
    mask = batch.batch["response_mask"][row].tolist()
    assert mask[: len(searcher.generated)] == searcher.generated
    assert sum(mask) == len(query) + len(summary) + 1
    # the reports the Leader and the Answerer read are context, never response tokens
    leader = next(s for s in result.samples if s.agent == "leader_0" and s.turn == 4)
    assert "the capital is Bex" in tiny_tokenizer.decode(leader.prompt_ids)
    assert "the capital is Bex" not in tiny_tokenizer.decode(leader.response_ids)


def test_a_leader_that_names_neither_subtask_nor_report_ends_without_a_candidate(tiny_tokenizer, index):
    group, _ = play(tiny_tokenizer, make(index), lambda prompt, call: "I am not sure what to do.")
    [result] = group.episodes
    assert len(result.episode.turns) == 1 and result.episode.done
    assert result.episode.turns[0].verifier["agents"]["leader_0"].decision == NO_CANDIDATE
    assert (result.judgement.team, result.judgement.submission) == (0.0, None)


def test_a_wave_past_the_last_one_ends_without_a_candidate(tiny_tokenizer, index):
    def leader_never_hands_over(prompt, call):
        if "You are the Leader" in prompt:
            return "<subtask>a</subtask><subtask>b</subtask><subtask>c</subtask>"
        return "<summary>nothing</summary>"

    group, _ = play(tiny_tokenizer, make(index, max_waves=2, max_searchers_per_wave=2), leader_never_hands_over)
    [result] = group.episodes
    turns = result.episode.turns
    assert [len(t.actions) for t in turns] == [1, 2, 1, 2, 1]
    assert turns[0].verifier["agents"]["leader_0"].dropped == 1
    assert turns[-1].verifier["agents"]["leader_0"].decision == NO_CANDIDATE
    assert result.judgement.team == 0.0


def test_a_searcher_without_summary_or_over_its_calls_and_an_untagged_answer_are_outcomes(tiny_tokenizer, index):
    def failing(prompt, call):
        if "You are the Leader" in prompt:
            return "<select>1</select>" if "1 of 3 sent" in prompt else "<subtask>capital of Arland</subtask>"
        if "You are a Searcher" in prompt:
            return "<search>Arland</search>"  # searches forever, never summarises
        return "The answer is: Tol"

    workflow = make(index, max_calls=2)
    group, metrics = play(tiny_tokenizer, workflow, failing)
    [result] = group.episodes
    turns = result.episode.turns
    searcher = next(s for s in result.samples if s.agent == "searcher_0")
    assert [u.outcome for u in searcher.tool_calls] == ["ok", "ok", OVER_BUDGET]
    assert turns[1].verifier["agents"]["searcher_0"].failure == NO_SUMMARY
    assert turns[1].verifier["agents"]["searcher_0"].searches == 3
    assert (
        "1 (capital of Arland) [no summary]"
        in workflow.render(result.episode, result.episode.agent("leader_0"), 2)[1]["content"]
    )
    candidate = turns[3].verifier["agents"]["answerer_0"]
    assert (candidate.failure, candidate.em, candidate.relaxed_em) == (UNTAGGED, False, True)
    assert result.judgement.team == 0.0
    assert metrics.tool_outcomes[OVER_BUDGET] == 1


def test_an_empty_answer_and_a_query_without_opening_tag(tiny_tokenizer, index):
    def odd(prompt, call):
        if "You are the Leader" in prompt:
            return "<select>1</select>" if "1 of 3 sent" in prompt else "<subtask>x</subtask>"
        if "You are a Searcher" in prompt:
            reply = prompt.rsplit("<|im_start|>assistant", 1)[1]
            return "<summary>s</summary>" if "<information>" in reply else "Arland</search>"
        return "<answer> </answer>"

    group, _ = play(tiny_tokenizer, make(index), odd)
    [result] = group.episodes
    searcher = next(s for s in result.samples if s.agent == "searcher_0")
    assert [u.outcome for u in searcher.tool_calls] == ["no_query"]
    candidate = result.episode.turns[-1].verifier["agents"]["answerer_0"]
    assert (candidate.answer, candidate.failure) == ("", "empty_candidate")


def test_settings_are_checked_and_named(index, tmp_path):
    with pytest.raises(ValueError, match="workflow.horizon: the hierarchical .* = 8 turns"):
        make_workflow("search", "qa", 1, 4, retriever=index)
    with pytest.raises(ValueError, match="workflow.options.retriever: .* is none of: an http"):
        make_workflow("search", "qa", 1, 8, retriever=str(tmp_path))
    with pytest.raises(ValueError, match="workflow.options.retriever: retrieval server http://127.0.0.1:9"):
        make_workflow("search", "qa", 1, 8, retriever="http://127.0.0.1:9", search_timeout_s=1.0)
    with pytest.raises(ValueError, match="workflow.options.tags.query: unknown tag"):
        make_workflow("search", "qa", 1, 8, retriever=index, tags={"query": "q"})
    with pytest.raises(ValueError, match="workflow.agents_per_role"):
        make_workflow("search", "qa", 2, 8, retriever=index)
    compact = SearchWorkflow(retriever=index, prompt_style="compact", tags={"search": "query"})
    assert compact.search_tool.stop == ("</query>",)
    assert "<query>q</query>" in compact.instructions["searcher"]


def test_the_cascaded_system_hands_its_one_searchers_report_to_the_answerers(tiny_tokenizer, index):
    def cascade(prompt, call):
        if "You are a Searcher" in prompt:
            reply = prompt.rsplit("<|im_start|>assistant", 1)[1]
            return "<summary>Bex is on the Tol</summary>" if "<information>" in reply else "<search>Arland</search>"
        return "<answer>Tol</answer>"

    workflow = make_workflow("search", "qa", 1, 2, retriever=index, system="cascaded", answer_candidates=2)
    assert [a.name for a in workflow.agents] == ["searcher_0", "answerer_0", "answerer_1"]
    group, _ = play(tiny_tokenizer, workflow, cascade)
    [result] = group.episodes
    episode = result.episode
    assert [sorted(t.actions) for t in episode.turns] == [["searcher_0"], ["answerer_0", "answerer_1"]]
    assert workflow.render(episode, episode.agent("searcher_0"), 0)[1]["content"] == f"## Subtask\n{QUESTION.statement}"
    assert (
        "1 (Which river is the capital of Arland on?) Bex is on the Tol"
        in workflow.render(episode, episode.agent("answerer_1"), 1)[1]["content"]
    )
    assert (result.judgement.team, result.judgement.submission) == (1.0, "Tol")
