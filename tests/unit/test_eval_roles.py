"""The evaluation's role metrics: the teacher's role advantage Δ̄ per response from real teacher
contexts and a stand-in teacher, per-role format violations and Δ means, swapped seats, settings."""

import json
from types import SimpleNamespace

import pytest

from verl_masopd.eval.__main__ import policy_paths
from verl_masopd.eval.role_advantage import RoleAdvantageScorer
from verl_masopd.eval.settings import eval_settings, file_sha256
from verl_masopd.rollout.evaluation import annotate, episode_record
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup, Sample
from verl_masopd.rollout.role_metrics import role_metrics
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows.base import Action, Judgement, Turn
from verl_masopd.workflows.math import MathWorkflow, ReasonerEvidence, ToolUserEvidence
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.single import SingleAgentMathWorkflow


class ContextLengthTeacher:
    """Stand-in teacher: log π_T(y_i | x, y_<i) = −|x| / 1000 − y_i / 10⁵ (depends on the context)."""

    async def score(self, requests):
        return [[-len(r.context_ids) / 1000 - y / 1e5 for y in r.response_ids] for r in requests]


def finished_episode(workflow, tokenizer):
    """A group of one episode of two turns; the reasoner's turn-1 response is empty (not scored)."""
    episode = workflow.reset(Problem(uid="m1", domain="math", statement="What is 6 times 7?", answer="42"))
    r, u = episode.agents
    texts = [("#### 41", "```python\nprint(42)\n```"), ("", "```python\nprint(42)\n```")]
    samples = []
    for t, (rt, ut) in enumerate(texts):
        for agent, text in ((r, rt), (u, ut)):
            prompt = encode_messages(tokenizer, workflow.render(episode, agent, t))
            ids = tokenizer.encode(text, add_special_tokens=False)
            samples.append(
                Sample(
                    "m1#0", 0, t, agent.name, agent.role, agent.index, agent.role, prompt, ids, [0.0] * len(ids), "stop"
                )
            )
        verifier = {
            "agents": {
                r.name: ReasonerEvidence(verdict=False, answer="41", correct=False, reason=None),
                u.name: ToolUserEvidence(
                    verdict=True, run=True, output="42\n", failure=None, answer="42", correct=True
                ),
            }
        }
        actions = {r.name: Action(r, rt, {"answer": "41"}), u.name: Action(u, ut, {"code": "print(42)"})}
        episode.turns.append(Turn(t, actions, "The answers disagree.", False, verifier))
    episode.done = True
    return RolloutGroup(episode.problem, [EpisodeResult("m1#0", episode, samples, Judgement(False, 0.0, "41"), 0)])


async def test_role_advantage_per_response(tiny_tokenizer):
    workflow = MathWorkflow()
    group = finished_episode(workflow, tiny_tokenizer)
    [result] = group.episodes
    scorer = RoleAdvantageScorer(workflow, tiny_tokenizer, ContextLengthTeacher(), max_context_length=4096)
    deltas = await scorer([group])
    episode = result.episode
    expected = {}
    for s in result.samples:
        if not s.response_ids:
            continue
        agent = episode.agent(s.agent)
        other = "tool_user" if s.role == "reasoner" else "reasoner"
        own = encode_messages(tiny_tokenizer, workflow.render(episode, agent, s.turn, role=s.role))
        contrast = encode_messages(tiny_tokenizer, workflow.render(episode, agent, s.turn, role=other))
        # Δ_k = ℓT_k(r) − ℓT_k(q): the token terms cancel, the context terms remain
        expected[("m1#0", s.turn, s.agent)] = (len(contrast) - len(own)) / 1000
    assert set(deltas) == set(expected) and len(expected) == 3
    for key, value in expected.items():
        assert value != 0 and deltas[key] == pytest.approx(value, abs=1e-6)

    record = {"episodes": [episode_record(workflow, result)]}
    annotate(record, deltas)
    turns = record["episodes"][0]["turns"]
    assert turns[1]["role_advantage"]["reasoner_0"] is None
    row = role_metrics(record["episodes"])
    tool_user = [expected[("m1#0", t, "tool_user_0")] for t in (0, 1)]
    assert row["role_advantage/tool_user"] == pytest.approx(sum(tool_user) / 2, abs=1e-6)
    assert row["role_advantage/reasoner"] == pytest.approx(expected[("m1#0", 0, "reasoner_0")], abs=1e-6)


def test_single_role_workflow_has_no_role_advantage(tiny_tokenizer):
    with pytest.raises(ValueError, match="one role"):
        RoleAdvantageScorer(SingleAgentMathWorkflow(), tiny_tokenizer, ContextLengthTeacher(), 4096)


def test_format_violations_per_role():
    turns = [
        {"outputs": {"coder_0": "a", "tester_0": "b"}, "parse_errors": {"coder_0": "no code block"}},
        {"outputs": {"coder_0": "c", "tester_0": "d"}, "parse_errors": {"coder_0": "x", "tester_0": "y"}},
    ]
    more = [{"outputs": {"coder_0": "e", "tester_0": "f"}, "parse_errors": {}}]
    seats = {"coder_0": {"role": "coder", "index": 0}, "tester_0": {"role": "tester", "index": 0}}
    row = role_metrics([{"agents": seats, "turns": turns}, {"agents": seats, "turns": more}])
    assert row == {"format_violations/coder": 2 / 3, "format_violations/tester": 1 / 3}


def test_swapped_seats():
    workflow = MathWorkflow()
    base = {"reasoner": "R", "tool_user": "R"}
    paths = policy_paths(workflow, "role", base, ["tool_user=T"], swap=True)
    assert paths == {"reasoner": "T", "tool_user": "R"}
    assert policy_paths(workflow, "role", base, ["tool_user=T"]) == {"reasoner": "R", "tool_user": "T"}
    with pytest.raises(ValueError, match="--swap-roles"):
        policy_paths(SingleAgentMathWorkflow(), "role", {"reasoner": "R"}, [], swap=True)
    with pytest.raises(ValueError, match="--swap-roles needs one policy per role"):
        policy_paths(workflow, "shared", {"shared": "S"}, [], swap=True)
    with pytest.raises(ValueError, match=r"--role-model 'reasoner=X'.*\['shared'\]"):
        policy_paths(workflow, "shared", {"shared": "S"}, ["reasoner=X"])


def test_settings_name_the_benchmark_file(tmp_path):
    data = tmp_path / "b.parquet"
    data.write_bytes(b"abc")
    args = SimpleNamespace(
        data=str(data), limit=None, checkpoint=None, imports=[], workflow="mas", horizon=2, agents_per_role=1,
        policy_sharing="role", prompt_style="paper", context_layout="role_first",
        workflow_options={"shown_chars": 500}, k=4, temperature=0.6,
        top_p=0.95, top_k=20, max_new_tokens=64, swap_roles=False, teacher=None, seed=3, engine="vllm",
        dtype="bfloat16",
    )  # fmt: skip
    settings = eval_settings(args, "math", 5)
    assert (
        settings["data_sha256"]
        == file_sha256(data)
        == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert settings["problems"] == 5 and settings["k"] == 4 and json.dumps(settings)
    assert settings["workflow_options"] == {"shown_chars": 500}
    assert (settings["engine"], settings["dtype"]) == ("vllm", "bfloat16")
