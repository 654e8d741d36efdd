"""The asynchronous multi-agent episode runner.

For G rollouts of each problem (one `RolloutGroup`) the manager plays the workflow turn by turn
until the workflow ends the episode: at turn t the agents the workflow schedules
(`workflow.schedule`) each get their context u (`verl_masopd.tokens.context`: render(episode, agent, t) in
the layout) sent to their policy's backend; an agent with a tool calls it inside its response
(rollout/tool_loop.py); the responses are parsed into actions (`sample_turn`, the single-turn
sampling that the tree sampler reuses) and `workflow.step` executes them; `step` and `judge`
(sandbox work, blocking) run in a thread pool so the event loop keeps serving the backends.

Two modes (`turn_barrier`):
- true (lockstep): every turn is a barrier. The requests of all live episodes for one policy at
  one point go to the backend as one call (the policies' calls run concurrently), and the next
  turn starts when every episode has stepped.
- false: each episode is a task of its own. When its agents' replies and its `step` are done,
  its next scheduled agents are sent at once (the agents of one turn together, so a wave of
  Searchers stays parallel); every request is its own backend call (a server batches them
  continuously, the HF backend gathers what waits into a batch), tool calls included, and an
  episode is judged and handed to `on_episode_done` as soon as it ends. Every request carries
  its own seed, request_seed(problem uid, g, turn, agent, copy), so the sampling of an episode
  does not depend on how the episodes interleave. `turn_seconds` then sums the episodes' own
  turn times (they overlap), and `tool_wall_seconds` the calls' own durations.

A generation that raises, times out or comes back malformed is retried up to `max_retries`
times; after that the turn is recorded as failed (empty response, finish_reason "failed"): the
workflow parses the empty text like any bad output, and the event is counted in `metrics`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from verl_masopd.rollout.backend import Generation, GenerationBackend, SamplingParams, request_seed
from verl_masopd.rollout.policies import policies_of, policy_of
from verl_masopd.rollout.records import FAILED, LENGTH, STOP, EpisodeResult, RolloutGroup, Sample
from verl_masopd.rollout.tool_loop import Response, ToolLoop, ToolRequest
from verl_masopd.tokens.context import NO_CUT, ContextEncoder, Cut
from verl_masopd.workflows.base import Action, Agent, Episode, Judgement, Turn, Workflow
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.tools import Tool

logger = logging.getLogger(__name__)


@dataclass
class Draw:
    """One agent's sampled response at one turn, the cut of its context and the action parsed from it."""

    agent: Agent
    policy: str
    prompt_ids: list[int]
    response: Response
    action: Action
    cut: Cut = NO_CUT

    @property
    def failed(self) -> bool:
        return self.response.finish_reason == FAILED

    def sample(self, episode_id: str, branch: int, turn: int) -> Sample:
        r = self.response
        return Sample(
            episode_id,
            branch,
            turn,
            self.agent.name,
            self.agent.role,
            self.agent.index,
            self.policy,
            list(self.prompt_ids),
            list(r.token_ids),
            list(r.log_probs),
            r.finish_reason,
            generated=list(r.generated),
            context_cut=self.cut,
            tool_calls=list(r.tool_calls),
            version=r.version,
        )


@dataclass
class RolloutMetrics:
    episodes: int = 0
    turns: int = 0
    generation_calls: int = 0
    generation_retries: int = 0
    failed_generations: int = 0
    truncated_prompts: int = 0
    generation_seconds: float = 0.0
    failure_reasons: Counter = field(default_factory=Counter)

    tool_calls: int = 0
    tool_seconds: float = 0.0
    tool_wall_seconds: float = 0.0
    observation_tokens: int = 0
    # tokens re-encoded where a reply was cut at a tool's stop string (tool_loop.py): with the
    # observation tokens, every response token the policy did not sample
    stop_cut_tokens: int = 0
    tool_outcomes: Counter = field(default_factory=Counter)
    # wall seconds of the turns' responses (tool calls inside included), keyed by the roles acting
    # ("searcher"; "reasoner+tool_user" for a turn where both act)
    turn_seconds: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, float]:
        keyed = ("failure_reasons", "tool_outcomes", "turn_seconds")
        out = {k: v for k, v in vars(self).items() if k not in keyed}
        out.update({f"failure/{reason}": n for reason, n in self.failure_reasons.items()})
        out.update({f"tool/{outcome}": n for outcome, n in self.tool_outcomes.items()})
        out.update({f"{roles}/turn_seconds": s for roles, s in self.turn_seconds.items()})
        return out


@dataclass
class _Live:
    episode_id: str
    episode: Episode
    key: str = ""
    samples: list[Sample] = field(default_factory=list)
    failed: int = 0


class RolloutManager:
    """Plays `workflow` with one `GenerationBackend` per policy (`backends[policy_name]`).

    `policy_sharing` maps agents to policies (rollout/policies.py); `tokenizer` encodes every
    context with `encode_messages` and decodes responses; `turn_barrier`: the mode (above);
    `weight_version(policy)`: the version of the weights the policy's backend holds, stamped on its
    generations (`Generation.version`). Use as a context manager, or `close()`.
    """

    def __init__(
        self,
        workflow: Workflow,
        backends: Mapping[str, GenerationBackend],
        tokenizer,
        *,
        policy_sharing: str = "role",
        sampling: SamplingParams = SamplingParams(),
        max_retries: int = 2,
        generation_timeout_s: float | None = None,
        step_threads: int = 4,
        max_prompt_len: int | None = None,
        context_layout: str = "role_first",
        turn_barrier: bool = True,
        weight_version: Callable[[str], int] = lambda policy: 0,
    ):
        needed = policies_of(workflow.agents, policy_sharing)
        missing = [p for p in needed if p not in backends]
        if missing:
            raise ValueError(
                f"no generation backend for policies {missing} (policy_sharing={policy_sharing!r}, "
                f"backends given: {sorted(backends)})"
            )
        if max_retries < 0:
            raise ValueError(f"rollout.max_retries must be >= 0, got {max_retries}")
        self.workflow = workflow
        self.backends = dict(backends)
        self.tokenizer = tokenizer
        self.policy_sharing = policy_sharing
        self.sampling = sampling
        self.max_retries = max_retries
        self.generation_timeout_s = generation_timeout_s
        self.max_prompt_len = max_prompt_len
        self.turn_barrier = turn_barrier
        self.weight_version = weight_version
        self.contexts = ContextEncoder(workflow, tokenizer, context_layout)
        self.metrics = RolloutMetrics()
        self._pool = ThreadPoolExecutor(max_workers=step_threads, thread_name_prefix="workflow-step")
        self._tools = ToolLoop(self._generate_triples, tokenizer, sampling)
        self._episode_counter = 0

    def __enter__(self) -> RolloutManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._tools.close()

    def _workflow_tools(self) -> dict[str, Tool]:
        tools = (self.workflow.tool(agent) for agent in self.workflow.agents)
        return {tool.name: tool for tool in tools if tool is not None}

    def begin_step(self) -> None:
        """A training step starts: fresh metrics, and each tool of the workflow drops its per-step state."""
        self.metrics = RolloutMetrics()
        for tool in self._workflow_tools().values():
            tool.begin_step()

    def tool_metrics(self) -> dict[str, float]:
        """The workflow's tools' own metrics since `begin_step`, keyed tool/<name>/<key>."""
        return {
            f"tool/{name}/{key}": value
            for name, tool in self._workflow_tools().items()
            for key, value in tool.step_metrics().items()
        }

    async def run(
        self,
        problems: Sequence[Problem],
        group_size: int = 1,
        on_episode_done: Callable[[EpisodeResult], None] | None = None,
    ) -> list[RolloutGroup]:
        """One `RolloutGroup` per problem, in problem order: G = `group_size` episodes each, all
        played at once; `on_episode_done` receives each episode as it is judged."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        check_unique_uids(problems)
        lives = [_Live(*self.new_episode(p), key=f"{p.uid}/{g}") for p in problems for g in range(group_size)]
        results: dict[int, EpisodeResult] = {}

        async def finish(i: int, live: _Live) -> None:
            judgement = await self.judge(live.episode)
            result = EpisodeResult(live.episode_id, live.episode, live.samples, judgement, live.failed)
            results[i] = result
            self.metrics.episodes += 1
            if on_episode_done is not None:
                on_episode_done(result)

        async def play(i: int, live: _Live) -> None:
            while not live.episode.done:
                await self._play_turns([live], keys=[live.key])
            await finish(i, live)

        if not self.turn_barrier:
            await asyncio.gather(*(play(i, live) for i, live in enumerate(lives)))
        else:
            finishing = []
            active = list(enumerate(lives))
            while active:
                await self._play_turns([live for _, live in active])
                for i, live in active:
                    if live.episode.done:
                        finishing.append(asyncio.ensure_future(finish(i, live)))
                active = [(i, live) for i, live in active if not live.episode.done]
            await asyncio.gather(*finishing)
        return [
            RolloutGroup(problem, [results[p * group_size + g] for g in range(group_size)])
            for p, problem in enumerate(problems)
        ]

    async def _play_turns(self, lives: Sequence[_Live], keys: Sequence[str] | None = None) -> None:
        """One turn of each of `lives` (all at the same turn): sample, record, step."""
        turn = len(lives[0].episode.turns)
        draws = await self.sample_turn([live.episode for live in lives], keys=keys)
        steps = []
        for live, [joint] in zip(lives, draws, strict=True):
            for draw in joint.values():
                live.samples.append(draw.sample(live.episode_id, 0, turn))
                live.failed += draw.failed
            steps.append(self.step(live.episode, {name: draw.action for name, draw in joint.items()}))
        await asyncio.gather(*steps)
        self.metrics.turns += len(lives)

    async def sample_turn(
        self, episodes: Sequence[Episode], copies: int = 1, keys: Sequence[str] | None = None
    ) -> list[list[dict[str, Draw]]]:
        """`copies` joint actions for each episode at its current turn: out[e][k][agent name].

        Every scheduled agent's context u is rendered once and sampled `copies` times; the requests
        of all episodes go to each policy's backend as one call, episode-major, agent, then copy.
        With `keys` (one per episode) each request is seeded with request_seed(key, turn, agent,
        copy) and goes on its own (`respond`).
        """
        seats = []
        for e, episode in enumerate(episodes):
            turn = len(episode.turns)
            for agent in self.workflow.schedule(episode):
                ids, cut = self.context(episode, agent, turn)
                key = None if keys is None else (keys[e], turn, agent.name)
                seats.append((episode, agent, policy_of(agent, self.policy_sharing), ids, cut, key))
        requests = [
            ToolRequest(policy, prompt, self.workflow.tool(agent), None if key is None else request_seed(*key, k))
            for _, agent, policy, prompt, _, key in seats
            for k in range(copies)
        ]
        start = time.perf_counter()
        responses = iter(await self.respond(requests))
        roles = "+".join(sorted({agent.role for _, agent, *_ in seats}))
        self.metrics.turn_seconds[roles] += time.perf_counter() - start
        out: list[list[dict[str, Draw]]] = [[{} for _ in range(copies)] for _ in episodes]
        index = {id(episode): e for e, episode in enumerate(episodes)}
        for episode, agent, policy, prompt, cut, _ in seats:
            for k in range(copies):
                response = next(responses)
                out[index[id(episode)]][k][agent.name] = Draw(
                    agent, policy, prompt, response, self.action_of(agent, response), cut
                )
        return out

    def context(self, episode: Episode, agent: Agent, turn: int) -> tuple[list[int], Cut]:
        """u, the token ids of what `agent` sees at `turn` in the context layout, and its cut.

        A context over `max_prompt_len` loses tokens from the middle of its history, as the
        teacher's contexts do (`verl_masopd.tokens.context`), so the policy is sampled from exactly the
        context it is trained on and x_r without p_t is u.
        """
        ids, cut = self.contexts.student(episode, agent, turn, self.max_prompt_len)
        self.metrics.truncated_prompts += cut.count > 0
        return ids, cut

    def action_of(self, agent: Agent, response: Response) -> Action:
        text = self.tokenizer.decode(response.token_ids, skip_special_tokens=True)
        return self.workflow.parse(agent, text)

    async def respond(self, requests: list[ToolRequest]) -> list[Response]:
        """Whole responses, tool calls inside included; the tool metrics go into `metrics`.

        Without the turn barrier every request plays its own tool loop, so no request waits for
        another's generation or tool call."""
        if not self.turn_barrier:
            responses = [r for [r] in await asyncio.gather(*(self._tools.run([q]) for q in requests))]
            for use in (use for r in responses for use in r.tool_calls):
                self.metrics.tool_calls += 1
                self.metrics.tool_seconds += use.seconds
                self.metrics.tool_wall_seconds += use.seconds
                self.metrics.observation_tokens += use.observation_tokens
                self.metrics.tool_outcomes[use.outcome] += 1
            self.metrics.stop_cut_tokens += sum(r.cut_tokens for r in responses)
            return responses
        tools = self._tools.metrics
        before = (tools.calls, tools.seconds, tools.wall_seconds, tools.observation_tokens, Counter(tools.outcomes))
        responses = await self._tools.run(requests)
        self.metrics.tool_calls += tools.calls - before[0]
        self.metrics.tool_seconds += tools.seconds - before[1]
        self.metrics.tool_wall_seconds += tools.wall_seconds - before[2]
        self.metrics.observation_tokens += tools.observation_tokens - before[3]
        self.metrics.tool_outcomes.update(tools.outcomes - before[4])
        self.metrics.stop_cut_tokens += sum(r.cut_tokens for r in responses)
        return responses

    async def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        """`workflow.step` in the thread pool; checks the workflow ends episodes at its horizon."""
        loop = asyncio.get_running_loop()
        turn = await loop.run_in_executor(self._pool, self.workflow.step, episode, actions)
        if not episode.done and len(episode.turns) >= self.workflow.horizon:
            raise RuntimeError(
                f"workflow {self.workflow.name!r} did not end the episode of {episode.problem.uid} "
                f"at its horizon {self.workflow.horizon}"
            )
        return turn

    async def judge(self, episode: Episode) -> Judgement:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.workflow.judge, episode)

    async def _generate_triples(self, requests: list[tuple[str, list[int], SamplingParams]]) -> list[Generation]:
        """One backend call per (policy, sampling), concurrently; one `Generation` per request, in order."""
        by_call: dict[tuple[str, SamplingParams], list[int]] = {}
        for i, (policy, _, sampling) in enumerate(requests):
            by_call.setdefault((policy, sampling), []).append(i)
        outputs = await asyncio.gather(
            *(
                self._generate_policy(policy, [requests[i][1] for i in idx], sampling)
                for (policy, sampling), idx in by_call.items()
            )
        )
        generations: list[Generation] = [None] * len(requests)  # type: ignore[list-item]
        for idx, gens in zip(by_call.values(), outputs, strict=True):
            for i, gen in zip(idx, gens, strict=True):
                generations[i] = gen
        return generations

    async def _generate_policy(
        self, policy: str, prompts: list[list[int]], sampling: SamplingParams
    ) -> list[Generation]:
        """Bounded retries of the prompts still without a well-formed generation, then "failed"."""
        backend = self.backends[policy]
        version = self.weight_version(policy)  # read before the call: never newer than the weights it runs on
        results: list[Generation | None] = [None] * len(prompts)
        pending = list(range(len(prompts)))
        for attempt in range(1 + self.max_retries):
            if attempt:
                self.metrics.generation_retries += 1
            self.metrics.generation_calls += 1
            start = time.perf_counter()
            try:
                gens = await asyncio.wait_for(
                    backend.generate([prompts[i] for i in pending], sampling), self.generation_timeout_s
                )
                if len(gens) != len(pending):
                    raise ValueError(f"backend returned {len(gens)} generations for {len(pending)} prompts")
            except Exception as e:  # a backend failure of any kind must not end the rollout: retry, then record
                self.metrics.failure_reasons[type(e).__name__] += 1
                logger.warning("policy %s: generation attempt %d failed: %r", policy, attempt + 1, e)
                continue
            finally:
                self.metrics.generation_seconds += time.perf_counter() - start
            still = []
            for i, gen in zip(pending, gens, strict=True):
                reason = _malformed(gen)
                if reason is None:
                    results[i] = replace(gen, version=max(version, gen.version))  # a newer backend stamp is exact
                else:
                    self.metrics.failure_reasons[reason] += 1
                    still.append(i)
            pending = still
            if not pending:
                break
        for i in pending:
            results[i] = Generation([], [], FAILED, version)
            self.metrics.failed_generations += 1
        return results  # type: ignore[return-value]

    def new_episode(self, problem: Problem) -> tuple[str, Episode]:
        """A fresh episode of `problem` and its id, unique over this manager's lifetime: the
        problem uid and a counter."""
        self._episode_counter += 1
        return f"{problem.uid}#{self._episode_counter}", self.workflow.reset(problem)


def _malformed(gen: Generation) -> str | None:
    """Why a backend's generation cannot be recorded, or None when it is well-formed."""
    if gen.finish_reason not in (STOP, LENGTH):
        return f"finish_reason_{gen.finish_reason}"
    if not gen.token_ids:
        return "empty_response"
    if len(gen.log_probs) != len(gen.token_ids):
        return "log_probs_length_mismatch"
    return None


def check_unique_uids(problems: Sequence[Problem]) -> None:
    seen = Counter(p.uid for p in problems)
    repeated = [uid for uid, n in seen.items() if n > 1]
    if repeated:
        raise ValueError(f"problem uids must be unique within a rollout batch (they key the groups): {repeated[:5]}")
