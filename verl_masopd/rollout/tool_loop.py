"""Responses with tool calls inside: generate until a call, run the tool, append its observation,
generate on (workflows/tools.py for the protocol).

For every request whose agent has a tool, generation runs with the tool's stop strings. A segment
whose text contains one is a call: the tool runs on the reply so far (in a thread, bounded by the
tool's `timeout_s`), its observation is encoded without special tokens, clipped to
`max_observation_tokens` and to the room left, and appended; the request goes back to its policy's
backend with the whole sequence so far as its prompt. Budgets, per response:

    |y| = Σ|g_i| + Σ|o_i| ≤ sampling.max_new_tokens        calls ≤ tool.max_calls

Each continuation's `max_new_tokens` is the room left, so a response never exceeds the budget the
rollout would give it without tools. Log-probs are the backend's for generated tokens and 0 for
observation tokens (`Response.generated` marks which is which). All requests of one `run` that
are generating at the same point go to the backends together, so a wave of agents shares every
backend call; the rollout without a turn barrier runs each request on its own (its calls then
wait for no other request), seeding segment i of a request with seed s by request_seed(s, i).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from verl_masopd.rollout.backend import Generation, SamplingParams, request_seed
from verl_masopd.rollout.records import FAILED, LENGTH, ToolUse
from verl_masopd.workflows.tools import ERROR, OK, OVER_BUDGET, TIMEOUT, TRUNCATED, Observation, Tool


@dataclass
class Response:
    """One agent's whole response: generated segments and observations in order."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    generated: list[int] = field(default_factory=list)
    tool_calls: list[ToolUse] = field(default_factory=list)

    @classmethod
    def of(cls, generation: Generation) -> Response:
        g = generation
        return cls(list(g.token_ids), list(g.log_probs), g.finish_reason, [1] * len(g.token_ids))


@dataclass
class ToolRequest:
    """A request of the loop: `tool` None is a plain generation; `seed` None: the backend's seeding."""

    policy: str
    prompt_ids: list[int]
    tool: Tool | None
    seed: int | None = None


@dataclass
class ToolMetrics:
    """`seconds`: the calls' durations summed; `wall_seconds`: the wall time of the rounds of calls
    (a round's calls run in parallel)."""

    calls: int = 0
    seconds: float = 0.0
    wall_seconds: float = 0.0
    observation_tokens: int = 0
    continuation_failures: int = 0
    outcomes: Counter = field(default_factory=Counter)


Generate = Callable[[list[tuple[str, list[int], SamplingParams]]], Awaitable[list[Generation]]]


class ToolLoop:
    """Plays requests to the end of their responses; `generate` is the rollout manager's batched,
    retried generation of (policy, prompt, sampling) triples."""

    def __init__(self, generate: Generate, tokenizer, sampling: SamplingParams, threads: int = 8):
        self.generate = generate
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.metrics = ToolMetrics()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tool")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, requests: list[ToolRequest]) -> list[Response]:
        responses: list[Response | None] = [None] * len(requests)
        active = list(range(len(requests)))
        while active:
            triples = [self._next(requests[i], responses[i]) for i in active]
            generations = await self.generate(triples)
            calls = []
            for i, gen in zip(active, generations, strict=True):
                response = responses[i] = self._extend(responses[i], gen)
                reply = self._call(requests[i].tool, response, gen)
                if reply is None:
                    continue
                tool = requests[i].tool
                if len(response.tool_calls) >= tool.max_calls or self._room(response) < 2:
                    self._record(response, ToolUse(tool.name, OVER_BUDGET, 0.0, 0))
                else:
                    calls.append((i, reply))
            start = time.perf_counter()
            await asyncio.gather(*(self._observe(requests[i].tool, responses[i], reply) for i, reply in calls))
            self.metrics.wall_seconds += time.perf_counter() - start if calls else 0.0
            active = [i for i, _ in calls]
        return responses  # type: ignore[return-value]

    def _room(self, response: Response) -> int:
        return self.sampling.max_new_tokens - len(response.token_ids)

    def _next(self, request: ToolRequest, response: Response | None) -> tuple[str, list[int], SamplingParams]:
        if response is None:
            sampling = self.sampling if request.tool is None else replace(self.sampling, stop=request.tool.stop)
            return request.policy, request.prompt_ids, _seeded(sampling, request.seed, 0)
        sampling = replace(self.sampling, stop=request.tool.stop, max_new_tokens=self._room(response))
        segment = len(response.tool_calls)
        return request.policy, request.prompt_ids + response.token_ids, _seeded(sampling, request.seed, segment)

    def _extend(self, response: Response | None, gen: Generation) -> Response:
        if response is None:
            return Response.of(gen)
        if gen.finish_reason == FAILED:
            # a continuation lost after the retries ends the response with what it has
            self.metrics.continuation_failures += 1
            response.finish_reason = LENGTH
            return response
        response.token_ids += gen.token_ids
        response.log_probs += gen.log_probs
        response.generated += [1] * len(gen.token_ids)
        response.finish_reason = gen.finish_reason
        return response

    def _call(self, tool: Tool | None, response: Response, gen: Generation) -> str | None:
        """The reply so far when this segment ends in a call, else None."""
        if tool is None or gen.finish_reason == FAILED or not gen.token_ids:
            return None
        if tool.call_end(self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)) is None:
            return None
        return self.tokenizer.decode(response.token_ids, skip_special_tokens=True)

    async def _observe(self, tool: Tool, response: Response, reply: str) -> None:
        """Run the tool on `reply` and append the observation (a recorded outcome in every case)."""
        start = time.perf_counter()
        try:
            loop = asyncio.get_running_loop()
            observation = await asyncio.wait_for(loop.run_in_executor(self._pool, tool.run, reply), tool.timeout_s)
            if not isinstance(observation, Observation):
                observation = Observation(f"[{tool.name} returned {type(observation).__name__}]", ERROR)
        except asyncio.TimeoutError:
            observation = Observation(f"[{tool.name} timed out after {tool.timeout_s:g}s]", TIMEOUT)
        except Exception as e:  # untrusted input may break the tool in any way: a recorded outcome
            observation = Observation(f"[{tool.name} failed: {type(e).__name__}]", ERROR)
        seconds = time.perf_counter() - start
        ids = self.tokenizer.encode(observation.text, add_special_tokens=False)
        keep = max(0, min(len(ids), tool.max_observation_tokens, self._room(response) - 1))  # a token to go on
        outcome = TRUNCATED if keep < len(ids) and observation.outcome == OK else observation.outcome
        response.token_ids += ids[:keep]
        response.log_probs += [0.0] * keep
        response.generated += [0] * keep
        self._record(response, ToolUse(tool.name, outcome, seconds, keep))

    def _record(self, response: Response, use: ToolUse) -> None:
        response.tool_calls.append(use)
        self.metrics.calls += 1
        self.metrics.seconds += use.seconds
        self.metrics.observation_tokens += use.observation_tokens
        self.metrics.outcomes[use.outcome] += 1


def _seeded(sampling: SamplingParams, seed: int | None, segment: int) -> SamplingParams:
    return sampling if seed is None else replace(sampling, seed=request_seed(seed, segment))
