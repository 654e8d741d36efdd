"""Tool calls inside a response (rollout/tool_loop.py): observations appended and masked, budgets
of calls and tokens, and every way a tool can fail recorded as an outcome, never raised."""

from __future__ import annotations

import asyncio
import time

import pytest

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.rollout.tool_loop import ToolLoop, ToolRequest
from verl_masopd.workflows.tools import Observation, Tool


class ScriptedReplies:
    """A stand-in policy: the k-th segment of a reply is `segments[k]` (k = calls already in the
    prompt), cut at the first stop string as a server would, at max_new_tokens, else ended by eos."""

    def __init__(self, tokenizer, segments: list[str]):
        self.tokenizer = tokenizer
        self.segments = segments
        self.calls: list[SamplingParams] = []

    async def __call__(self, triples):
        out = []
        for _, prompt, sampling in triples:
            self.calls.append(sampling)
            k = self.tokenizer.decode(prompt).count("</calc>")
            text = self.segments[min(k, len(self.segments) - 1)]
            ends = [text.find(s) + len(s) for s in sampling.stop if s in text]
            ids = self.tokenizer.encode(text[: min(ends)] if ends else text, add_special_tokens=False)
            if not ends:
                ids.append(self.tokenizer.eos_token_id)
            finish = STOP
            if len(ids) > sampling.max_new_tokens:
                ids, finish = ids[: sampling.max_new_tokens], LENGTH
            out.append(Generation(ids, [-0.5] * len(ids), finish))
        return out


class Calculator(Tool):
    name = "calc"
    stop = ("</calc>",)

    def run(self, reply: str) -> Observation:
        expression = reply.rsplit("<calc>", 1)[-1].removesuffix("</calc>")
        a, b = expression.split("*")
        return Observation(f" [obs {int(a) * int(b)}] ")


class Failing(Calculator):
    def __init__(self, behaviour: str, **kwargs):
        super().__init__(**kwargs)
        self.behaviour = behaviour

    def run(self, reply: str) -> Observation:
        if self.behaviour == "raise":
            raise ZeroDivisionError("untrusted input")
        if self.behaviour == "hang":
            time.sleep(2)
        if self.behaviour == "huge":
            return Observation("[obs " + "9" * 100_000 + "]")
        return "not an observation"


def play(tokenizer, segments, tool, max_new_tokens=64):
    backend = ScriptedReplies(tokenizer, segments)
    loop = ToolLoop(backend, tokenizer, SamplingParams(max_new_tokens=max_new_tokens))
    try:
        [response] = asyncio.run(loop.run([ToolRequest("solver", [1, 2, 3], tool)]))
    finally:
        loop.close()
    return response, loop.metrics, backend


def test_two_calls_inside_one_response_are_observed_and_masked(tiny_tokenizer):
    segments = ["x <calc>3*4</calc>", " then <calc>5*6</calc>", " so #### 42"]
    response, metrics, backend = play(tiny_tokenizer, segments, Calculator())
    text = tiny_tokenizer.decode(response.token_ids, skip_special_tokens=True)
    assert text == "x <calc>3*4</calc> [obs 12]  then <calc>5*6</calc> [obs 30]  so #### 42"
    observed = tiny_tokenizer.decode([t for t, g in zip(response.token_ids, response.generated) if not g])
    assert observed == " [obs 12]  [obs 30] "
    assert all(lp == 0.0 for lp, g in zip(response.log_probs, response.generated) if not g)
    assert all(lp == -0.5 for lp, g in zip(response.log_probs, response.generated) if g)
    assert [u.outcome for u in response.tool_calls] == ["ok", "ok"] and response.finish_reason == STOP
    assert metrics.calls == 2 and metrics.observation_tokens == len(response.generated) - sum(response.generated)
    # every segment is generated with the tool's stop string and only the room the response has left
    assert [s.stop for s in backend.calls] == [("</calc>",)] * 3
    first = len(tiny_tokenizer.encode(segments[0])) + len(tiny_tokenizer.encode(" [obs 12] "))
    assert backend.calls[1].max_new_tokens == 64 - first


def test_the_call_budget_ends_the_reply_at_its_next_call(tiny_tokenizer):
    segments = ["<calc>1*2</calc>", "<calc>3*4</calc>", "<calc>5*6</calc>"]
    response, metrics, _ = play(tiny_tokenizer, segments, Calculator(max_calls=1))
    assert [u.outcome for u in response.tool_calls] == ["ok", "over_budget"]
    assert tiny_tokenizer.decode(response.token_ids).endswith("[obs 2] <calc>3*4</calc>")
    assert metrics.outcomes == {"ok": 1, "over_budget": 1}


def test_the_token_budget_covers_generated_and_observation_tokens(tiny_tokenizer):
    segments = ["<calc>3*4</calc>"] * 50
    response, _, backend = play(tiny_tokenizer, segments, Calculator(max_calls=100), max_new_tokens=40)
    assert len(response.token_ids) == 40 and response.finish_reason == LENGTH
    assert all(s.max_new_tokens >= 1 for s in backend.calls) and [u.outcome for u in response.tool_calls] == [
        "ok",
        "truncated",
    ]


@pytest.mark.parametrize(
    ("behaviour", "outcome", "text"),
    [
        ("raise", "error", "[calc failed: ZeroDivisionError]"),
        ("hang", "timeout", "[calc timed out after 0.2s]"),
        ("wrong type", "error", "[calc returned str]"),
    ],
)
def test_a_failing_tool_becomes_a_recorded_observation(tiny_tokenizer, behaviour, outcome, text):
    segments = ["<calc>3*4</calc>", " done"]
    response, metrics, _ = play(tiny_tokenizer, segments, Failing(behaviour, timeout_s=0.2))
    assert [u.outcome for u in response.tool_calls] == [outcome] and metrics.outcomes[outcome] == 1
    decoded = tiny_tokenizer.decode(response.token_ids, skip_special_tokens=True)
    assert decoded == f"<calc>3*4</calc>{text} done"


def test_a_huge_observation_is_clipped_to_its_budget(tiny_tokenizer):
    tool = Failing("huge", max_observation_tokens=12)
    response, metrics, _ = play(tiny_tokenizer, ["<calc>3*4</calc>", " done"], tool, max_new_tokens=200)
    assert response.tool_calls[0].outcome == "truncated" and response.tool_calls[0].observation_tokens == 12
    assert len(response.generated) - sum(response.generated) == 12 and metrics.observation_tokens == 12


def test_a_reply_without_a_call_is_one_plain_generation(tiny_tokenizer):
    response, metrics, backend = play(tiny_tokenizer, ["#### 12"], Calculator())
    assert response.tool_calls == [] and all(response.generated) and len(backend.calls) == 1
    assert metrics.calls == 0


def test_tool_settings_are_checked():
    with pytest.raises(ValueError, match="max_calls"):
        Calculator(max_calls=-1)
    with pytest.raises(ValueError, match="max_observation_tokens"):
        Calculator(max_observation_tokens=0)
