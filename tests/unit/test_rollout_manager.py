"""The episode runner over a real Workflow subclass ("relay": two roles that must say the same
answer) and a scripted stand-in generation backend."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import episodes_of
from verl_masopd.tokens.chat import encode_messages
from verl_masopd.workflows.base import Action, Episode, Judgement, Reward, Turn, Workflow
from verl_masopd.workflows.problem import Problem

LOG_PROB = -0.25


class RelayWorkflow(Workflow):
    """Agents state an answer; agreement when all answers are equal; everyone sees all answers."""

    name, domain, roles = "relay", "math", ("asker", "checker")

    def __init__(self, agents_per_role=1, horizon=4, step_delay_s=0.0):
        super().__init__(agents_per_role, horizon)
        self.step_delay_s = step_delay_s
        self.step_threads: set[str] = set()

    def render(self, episode, agent, turn, role=None):
        seen = "; ".join(f"{n}={a.text}" for n, a in sorted(episode.turns[turn - 1].actions.items())) if turn else ""
        return [
            {"role": "system", "content": f"You are {role or agent.role}."},
            {
                "role": "user",
                "content": f"Problem {episode.problem.uid}: {episode.problem.statement}\n"
                f"turn {turn} seat {agent.name} seen [{seen}]",
            },
        ]

    def parse(self, agent, text):
        return Action(agent, text, {"answer": text.strip()}, None if text.strip() else "empty output")

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        self.step_threads.add(threading.current_thread().name)
        time.sleep(self.step_delay_s)
        answers = {a.fields["answer"] for a in actions.values()}
        turn = Turn(len(episode.turns), actions, report="", agreed=len(answers) == 1 and "" not in answers)
        episode.turns.append(turn)
        episode.done = turn.agreed or len(episode.turns) >= self.horizon
        return turn

    def judge(self, episode):
        last = episode.turns[-1].actions["asker_0"].fields["answer"]
        local = {
            (t.index, n): Reward(float(a.fields["answer"] == episode.problem.answer), True)
            for t in episode.turns
            for n, a in t.actions.items()
        }
        return Judgement(last == episode.problem.answer, float(last == episode.problem.answer), last, local)

    def attribute(self, episode, turn):
        return None


class ScriptedBackend:
    """Answers `script(prompt_text)` + eos, each token with log-prob LOG_PROB; records call sizes."""

    def __init__(self, tokenizer, script, fail_calls=0, delay_s=0.0):
        self.tokenizer, self.script = tokenizer, script
        self.fail_calls, self.delay_s = fail_calls, delay_s
        self.calls: list[int] = []

    async def generate(self, prompts, sampling):
        self.calls.append(len(prompts))
        if len(self.calls) <= self.fail_calls:
            raise ConnectionError("server unavailable")
        await asyncio.sleep(self.delay_s)
        out = []
        for p in prompts:
            ids = self.tokenizer.encode(self.script(self.tokenizer.decode(p)), add_special_tokens=False)
            ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
            out.append(Generation(ids, [LOG_PROB] * len(ids), "stop"))
        return out

    def update_weights(self, state_dict, version):
        pass


def answer_at_turn(turn_of_agreement: dict[str, int]):
    """Problem p's agents agree on "7" from turn turn_of_agreement[p]; before, each says its seat name."""

    def script(prompt: str) -> str:
        uid, turn, seat = re.search(r"Problem (\w+):.*turn (\d+) seat (\w+)", prompt, re.S).groups()
        return "7" if int(turn) >= turn_of_agreement[uid] else seat

    return script


def problems(*uids):
    return [Problem(uid=u, domain="math", statement=f"what is 3+4 ({u})", answer="7") for u in uids]


def manager(tokenizer, script, sharing="role", agents_per_role=1, horizon=4, **kw):
    workflow = RelayWorkflow(agents_per_role, horizon)
    names = {"role": ["asker", "checker"], "shared": ["shared"], "agent": [a.name for a in workflow.agents]}[sharing]
    backends = {n: ScriptedBackend(tokenizer, script) for n in names}
    return RolloutManager(workflow, backends, tokenizer, policy_sharing=sharing, **kw), backends


async def test_records_every_turn_with_its_exact_context(tiny_tokenizer):
    m, _ = manager(tiny_tokenizer, answer_at_turn({"p0": 1}))
    with m:
        [result] = episodes_of(await m.run(problems("p0")))
    assert [t.agreed for t in result.episode.turns] == [False, True]
    assert result.judgement.correct and result.judgement.team == 1.0
    assert [(s.turn, s.agent, s.role, s.agent_index, s.policy) for s in result.samples] == [
        (0, "asker_0", "asker", 0, "asker"),
        (0, "checker_0", "checker", 0, "checker"),
        (1, "asker_0", "asker", 0, "asker"),
        (1, "checker_0", "checker", 0, "checker"),
    ]
    for s in result.samples:
        agent = result.episode.agent(s.agent)
        assert s.prompt_ids == encode_messages(tiny_tokenizer, m.workflow.render(result.episode, agent, s.turn))
        assert (
            tiny_tokenizer.decode(s.response_ids, skip_special_tokens=True)
            == result.episode.turns[s.turn].actions[s.agent].text
        )
        assert s.rollout_log_probs == [LOG_PROB] * len(s.response_ids)
        assert s.finish_reason == "stop" and s.branch == 0
    assert "asker_0=asker_0; checker_0=checker_0" in tiny_tokenizer.decode(result.samples[2].prompt_ids)


async def test_group_rollouts_batched_per_policy_per_turn(tiny_tokenizer):
    m, backends = manager(tiny_tokenizer, answer_at_turn({"p0": 0, "p1": 1, "p2": 9}), horizon=3)
    with m:
        groups = await m.run(problems("p0", "p1", "p2"), group_size=2)
    assert [(g.uid, len(g.episodes)) for g in groups] == [("p0", 2), ("p1", 2), ("p2", 2)]
    assert all(r.episode.problem is g.problem for g in groups for r in g.episodes)
    results = episodes_of(groups)
    assert len({r.episode_id for r in results}) == 6
    assert [len(r.episode.turns) for r in results] == [1, 1, 2, 2, 3, 3]
    # one call per policy per turn, holding every live episode: 6, then 4 (p0 done), then 2 (p2 at horizon)
    assert backends["asker"].calls == [6, 4, 2] and backends["checker"].calls == [6, 4, 2]
    assert [r.judgement.correct for r in results] == [True, True, True, True, False, False]
    assert m.metrics.episodes == 6 and m.metrics.turns == 12 and m.metrics.failed_generations == 0


@pytest.mark.parametrize(
    "sharing,calls",
    [("shared", {"shared": [8]}), ("agent", {"asker_0": [2], "asker_1": [2], "checker_0": [2], "checker_1": [2]})],
)
async def test_policy_sharing_routes_agents_to_backends(tiny_tokenizer, sharing, calls):
    m, backends = manager(tiny_tokenizer, lambda prompt: "7", sharing=sharing, agents_per_role=2)
    with m:
        results = episodes_of(await m.run(problems("p0", "p1")))
    assert {n: b.calls for n, b in backends.items()} == calls
    expected = {"shared": {"shared"}, "agent": {"asker_0", "asker_1", "checker_0", "checker_1"}}[sharing]
    assert {s.policy for r in results for s in r.samples} == expected
    assert all(s.policy == (s.agent if sharing == "agent" else "shared") for r in results for s in r.samples)
    seats = {(s.agent, s.role, s.agent_index) for r in results for s in r.samples}
    assert seats == {
        ("asker_0", "asker", 0),
        ("asker_1", "asker", 1),
        ("checker_0", "checker", 0),
        ("checker_1", "checker", 1),
    }


def test_missing_backend_named(tiny_tokenizer):
    with pytest.raises(ValueError, match=r"no generation backend for policies \['checker'\]"):
        RolloutManager(RelayWorkflow(), {"asker": ScriptedBackend(tiny_tokenizer, str)}, tiny_tokenizer)


async def test_duplicate_problem_uids_rejected(tiny_tokenizer):
    m, _ = manager(tiny_tokenizer, lambda prompt: "7")
    with m, pytest.raises(ValueError, match="unique"):
        await m.run(problems("p0", "p0"))


async def test_transient_failure_retried(tiny_tokenizer):
    workflow = RelayWorkflow()
    flaky = ScriptedBackend(tiny_tokenizer, lambda p: "7", fail_calls=1)
    backends = {"asker": flaky, "checker": ScriptedBackend(tiny_tokenizer, lambda p: "7")}
    with RolloutManager(workflow, backends, tiny_tokenizer, max_retries=2) as m:
        [result] = episodes_of(await m.run(problems("p0")))
    assert flaky.calls == [1, 1]
    assert result.failed_generations == 0 and result.judgement.correct
    assert m.metrics.generation_retries == 1 and m.metrics.failure_reasons["ConnectionError"] == 1


async def test_persistent_failure_becomes_failed_turns_not_an_error(tiny_tokenizer):
    workflow = RelayWorkflow(horizon=2)
    dead = ScriptedBackend(tiny_tokenizer, lambda p: "7", fail_calls=100)
    backends = {"asker": dead, "checker": ScriptedBackend(tiny_tokenizer, lambda p: "7")}
    with RolloutManager(workflow, backends, tiny_tokenizer, max_retries=2) as m:
        results = episodes_of(await m.run(problems("p0", "p1")))
    assert dead.calls == [2, 2, 2, 2, 2, 2]  # 2 turns x (1 try + 2 retries), both episodes batched
    for r in results:
        failed = [s for s in r.samples if s.agent == "asker_0"]
        assert [(s.finish_reason, s.response_ids, s.rollout_log_probs) for s in failed] == [("failed", [], [])] * 2
        assert r.failed_generations == 2
        assert r.episode.turns[0].actions["asker_0"].error == "empty output"
        assert not r.episode.turns[0].agreed and len(r.episode.turns) == 2
    assert m.metrics.failed_generations == 4 and m.metrics.generation_retries == 4


async def test_timeout_counts_as_failure(tiny_tokenizer):
    workflow = RelayWorkflow(horizon=1)
    slow = ScriptedBackend(tiny_tokenizer, lambda p: "7", delay_s=5.0)
    backends = {"asker": slow, "checker": ScriptedBackend(tiny_tokenizer, lambda p: "7")}
    with RolloutManager(workflow, backends, tiny_tokenizer, max_retries=1, generation_timeout_s=0.05) as m:
        [result] = episodes_of(await m.run(problems("p0")))
    assert result.failed_generations == 1 and m.metrics.failure_reasons["TimeoutError"] == 2
    assert result.samples[1].finish_reason == "stop"


async def test_malformed_generations_retried_alone(tiny_tokenizer):
    class HalfBroken(ScriptedBackend):
        async def generate(self, prompts, sampling):
            out = await super().generate(prompts, sampling)
            if len(self.calls) == 1:
                out[0] = Generation(out[0].token_ids, out[0].log_probs[:-1], "stop")
            return out

    broken = HalfBroken(tiny_tokenizer, lambda p: "7")
    backends = {"asker": broken, "checker": ScriptedBackend(tiny_tokenizer, lambda p: "7")}
    with RolloutManager(RelayWorkflow(), backends, tiny_tokenizer) as m:
        results = episodes_of(await m.run(problems("p0", "p1", "p2")))
    assert broken.calls == [3, 1]
    assert m.metrics.failure_reasons["log_probs_length_mismatch"] == 1
    assert all(r.failed_generations == 0 and r.judgement.correct for r in results)


async def test_workflow_step_runs_off_the_event_loop(tiny_tokenizer):
    workflow = RelayWorkflow(horizon=1, step_delay_s=0.3)
    backends = {n: ScriptedBackend(tiny_tokenizer, lambda p: "7") for n in ("asker", "checker")}
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    with RolloutManager(workflow, backends, tiny_tokenizer) as m:
        task = asyncio.ensure_future(ticker())
        await m.run(problems("p0"))
        task.cancel()
    assert threading.main_thread().name not in workflow.step_threads
    assert all(name.startswith("workflow-step") for name in workflow.step_threads)
    assert ticks > 5


async def test_sampling_params_passed_through(tiny_tokenizer):
    seen = []

    class Recording(ScriptedBackend):
        async def generate(self, prompts, sampling):
            seen.append(sampling)
            return await super().generate(prompts, sampling)

    backends = {n: Recording(tiny_tokenizer, lambda p: "7") for n in ("asker", "checker")}
    params = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=64)
    with RolloutManager(RelayWorkflow(), backends, tiny_tokenizer, sampling=params) as m:
        await m.run(problems("p0"))
    assert seen == [params, params]


class LatencyBackend(ScriptedBackend):
    """A ScriptedBackend whose reply to a prompt of problem p takes `delays[p]` seconds; logs
    (uid, turn, "start" | "end", time) and each call's sampling seed."""

    def __init__(self, tokenizer, script, delays, log):
        super().__init__(tokenizer, script)
        self.delays, self.log = delays, log
        self.seeds: list[int | None] = []

    async def generate(self, prompts, sampling):
        pattern = r"Problem (\w+):.*turn (\d+)"
        keys = [re.search(pattern, self.tokenizer.decode(p), re.S).groups() for p in prompts]
        self.seeds.append(sampling.seed)
        self.log.extend((uid, int(turn), "start", time.perf_counter()) for uid, turn in keys)
        await asyncio.sleep(max(self.delays[uid] for uid, _ in keys))
        out = await super().generate(prompts, sampling)
        self.log.extend((uid, int(turn), "end", time.perf_counter()) for uid, turn in keys)
        return out


async def play_with_latency(tokenizer, turn_barrier, script, delays, uids=("fast", "slow"), group_size=1):
    """(results, {uid: time its episode was judged}, event log, backends) of one rollout."""
    log, done = [], {}
    backends = {r: LatencyBackend(tokenizer, script, delays, log) for r in ("asker", "checker")}
    with RolloutManager(RelayWorkflow(horizon=4), backends, tokenizer, turn_barrier=turn_barrier) as m:
        groups = await m.run(
            problems(*uids),
            group_size=group_size,
            on_episode_done=lambda r: done.setdefault(r.episode.problem.uid, time.perf_counter()),
        )
    return episodes_of(groups), done, log, backends


def records(results):
    return [
        (r.episode_id, s.turn, s.agent, s.prompt_ids, s.response_ids, s.rollout_log_probs, s.finish_reason)
        for r in results
        for s in r.samples
    ]


async def test_without_the_barrier_a_fast_episode_never_waits_for_a_slow_one(tiny_tokenizer):
    script, delays = answer_at_turn({"fast": 2, "slow": 0}), {"fast": 0.01, "slow": 0.4}
    lockstep, done_lockstep, log_lockstep, _ = await play_with_latency(tiny_tokenizer, True, script, delays)
    free, done, log, backends = await play_with_latency(tiny_tokenizer, False, script, delays)
    first_slow_reply = max(t for uid, turn, what, t in log if (uid, turn, what) == ("slow", 0, "end"))
    # the fast episode played all 3 of its turns and was judged before the slow one's first reply came
    assert [len(r.episode.turns) for r in free] == [3, 1]
    assert done["fast"] < first_slow_reply
    # lockstep: the fast episode's turn 1 starts only after the slow reply of turn 0
    slow_end = max(t for uid, turn, what, t in log_lockstep if (uid, turn, what) == ("slow", 0, "end"))
    assert min(t for uid, turn, what, t in log_lockstep if (uid, turn) == ("fast", 1)) > slow_end
    assert done_lockstep["fast"] > slow_end
    # every request its own call, with its own seed; the records are the lockstep ones
    assert all(n == 1 for b in backends.values() for n in b.calls)
    seeds = [s for b in backends.values() for s in b.seeds]
    assert None not in seeds and len(set(seeds)) == len(seeds) == 8
    assert records(free) == records(lockstep)


async def test_without_the_barrier_sampling_follows_the_request_seeds_not_the_interleaving(tiny_tokenizer):
    """A backend whose reply is a function of the request's seed: two rollouts whose episodes
    interleave in opposite orders record the same episodes."""

    class SeedBackend(LatencyBackend):
        async def generate(self, prompts, sampling):
            self.script = lambda prompt: str(sampling.seed % 3)
            return await super().generate(prompts, sampling)

    outcomes = []
    for delays in ({"p0": 0.0, "p1": 0.05}, {"p0": 0.05, "p1": 0.0}):
        log = []
        backends = {r: SeedBackend(tiny_tokenizer, None, delays, log) for r in ("asker", "checker")}
        with RolloutManager(RelayWorkflow(horizon=4), backends, tiny_tokenizer, turn_barrier=False) as m:
            played = records(episodes_of(await m.run(problems("p0", "p1"), group_size=2)))
        seeds = [s for b in backends.values() for s in b.seeds]
        outcomes.append((played, sorted(log, key=lambda e: e[3])[-1][0], seeds))
    (first, last_a, seeds_a), (second, last_b, seeds_b) = outcomes
    assert (last_a, last_b) == ("p1", "p0")  # the interleaving did differ
    assert first == second and sorted(seeds_a) == sorted(seeds_b)
    assert len(set(seeds_a)) == len(seeds_a)  # the G episodes of a problem draw with seeds of their own
