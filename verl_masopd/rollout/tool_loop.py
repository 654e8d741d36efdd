"""Responses with tool calls inside: generate until a call, run the tool, append its observation,
generate on (workflows/tools.py for the protocol).

For every request whose agent has a tool, generation runs with the tool's stop strings. A segment
whose text contains one is a call: the tool runs on the reply so far, which ends exactly at the
call's stop string (in a thread, bounded by the tool's `timeout_s`), its observation is encoded as
text (`verl_masopd.tokens.chat.encode_text`: no control token, whatever it prints), clipped to
`max_observation_tokens` and to the room left, and appended; the request goes back to its policy's
backend with the whole sequence so far as its prompt. Budgets, per response:

    |y| = Σ|g_i| + Σ|o_i| ≤ sampling.max_new_tokens        calls ≤ tool.max_calls

Each continuation's `max_new_tokens` is the room left, so a response never exceeds the budget the
rollout would give it without tools. Log-probs are the backend's for generated tokens and 0 for
observation tokens (`Response.generated` marks which is which). All requests of one `run` that
are generating at the same point go to the backends together, so a wave of agents shares every
backend call; the rollout without a turn barrier runs each request on its own (its calls then
wait for no other request), seeding segment i of a request with seed s by request_seed(s, i).

Cutting at the stop string. Both backends end a segment with the token that completes a stop
string (vLLM truncates its text there but returns that token's id whole; the HF backend does the
same). With a BPE tokenizer that token can reach past the string: `</calc>` completed by the token
`>.`. Such a segment is cut at the string: its last token is replaced by the encoding of its text
up to the end of the stop string (`>`), and these replacement tokens enter like an observation's
(log-prob 0, generated 0), since the policy did not sample them. The tool, the context that follows
and the trained tokens then hold exactly the text up to and including the stop string, on either
backend. Should the re-encoding not decode back to that text, the sampled token stays and only the
tool's text is cut.
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
from verl_masopd.tokens.chat import encode_text
from verl_masopd.workflows.tools import ERROR, OK, OVER_BUDGET, TIMEOUT, TRUNCATED, Observation, Tool


@dataclass
class Response:
    """One agent's whole response: generated segments and observations in order; `cut_tokens`: the
    tokens re-encoded where a segment was cut at its stop string (not sampled, like observations)."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    generated: list[int] = field(default_factory=list)
    tool_calls: list[ToolUse] = field(default_factory=list)
    cut_tokens: int = 0
    version: int = 0  # the oldest weight version of its segments (Generation.version)


@dataclass
class Segment:
    """One generation's tokens as they enter the response; `overflow`: characters of its text past
    its call's stop string that stay in the tokens (the re-encoding could not remove them)."""

    token_ids: list[int]
    log_probs: list[float]
    generated: list[int]
    overflow: int


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
                segment = self._segment(requests[i].tool, gen)
                response = responses[i] = self._extend(responses[i], gen, segment)
                reply = self._call(requests[i].tool, response, segment)
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

    def _segment(self, tool: Tool | None, gen: Generation) -> Segment:
        """The generation as a segment, cut at its call's stop string (the module doc)."""
        segment = Segment(list(gen.token_ids), list(gen.log_probs), [1] * len(gen.token_ids), 0)
        if tool is None or not gen.token_ids:
            return segment
        text = self._decode(gen.token_ids)
        end = tool.call_end(text)
        if end is None or end == len(text):
            return segment
        segment.overflow = len(text) - end
        head = self._decode(gen.token_ids[:-1])
        if not text.startswith(head) or end <= len(head):
            return segment
        piece = encode_text(self.tokenizer, text[len(head) : end])
        if self._decode(gen.token_ids[:-1] + piece) != text[:end]:
            return segment
        keep = len(gen.token_ids) - 1
        return Segment(
            segment.token_ids[:keep] + piece,
            segment.log_probs[:keep] + [0.0] * len(piece),
            [1] * keep + [0] * len(piece),
            0,
        )

    def _extend(self, response: Response | None, gen: Generation, segment: Segment) -> Response:
        if gen.finish_reason == FAILED and response is not None:
            # a continuation lost after the retries ends the response with what it has
            self.metrics.continuation_failures += 1
            response.finish_reason = LENGTH
            return response
        if response is None:
            response = Response([], [], gen.finish_reason, version=gen.version)
        response.version = min(response.version, gen.version)
        response.token_ids += segment.token_ids
        response.log_probs += segment.log_probs
        response.generated += segment.generated
        response.cut_tokens += len(segment.generated) - sum(segment.generated)
        response.finish_reason = gen.finish_reason
        return response

    def _call(self, tool: Tool | None, response: Response, segment: Segment) -> str | None:
        """The reply so far, up to and including the stop string, when this segment ends in a call, else None."""
        if tool is None or not segment.token_ids:
            return None
        text = self._decode(segment.token_ids)
        if tool.call_end(text) is None:
            return None
        reply = self._decode(response.token_ids)
        return reply[: len(reply) - segment.overflow]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

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
        ids = encode_text(self.tokenizer, observation.text)
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
