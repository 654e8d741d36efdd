"""The calculator workflow of examples/calculator_agent.py, played by the real rollout manager with
a scripted policy that honours stop strings: each call's observation sits in the response as
context (generated 0, log-prob 0, response mask 0), every call's outcome is recorded, hostile
expressions are outcomes rather than exceptions, a call past the budget ends the reply, and the
judged answer is the reply's final `#### <answer>`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from verl_masopd.cli.extensions import import_extensions
from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.workflows import make_workflow, workflow_kind
from verl_masopd.workflows.problem import Problem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator_agent.py"
ASSISTANT = "<|im_start|>assistant\n"
CLOSE = "</calc>"
LOG_PROB = -0.25

# statement, y*, the policy's whole reply, the observation of each call that runs
CASES = {
    "two_calls": (
        "What is 17 * 23 + 9?",
        "400",
        "17 * 23 is <calc>17 * 23</calc> and adding 9 gives <calc>391 + 9</calc>\n#### 400",
        [" <result>391</result>", " <result>400</result>"],
    ),
    "hostile": (
        "What is 2 ** 10 - 24?",
        "1000",
        "<calc>__import__('os').getcwd()</calc> no, <calc>9**9**9**9</calc> no, by hand\n#### 1000",
        [" <result>error: not an arithmetic expression</result>", " <result>error: exponent over 100</result>"],
    ),
    "over_budget": (
        "What is 6 * 7 * 2 + 2?",
        "86",
        "<calc>6 * 7</calc> then <calc>42 * 2</calc> then <calc>84 + 2</calc> so\n#### 86",
        [" <result>42</result>", " <result>84</result>"],
    ),
    "wrong_final": (
        "What is 12 * 12?",
        "144",
        "<calc>12 * 12</calc> so\n#### 124",
        [" <result>144</result>"],
    ),
}


class ScriptedCalculatorUser:
    """A policy with one fixed reply per problem, generated as vLLM and HF generate: it stops after
    the token that completes a stop string (finish "stop"), at its eos (finish "stop") or at
    `max_new_tokens` (finish "length"). Given the reply so far (the prompt after the assistant
    marker, observations included) it goes on after its k-th call, k the calls in it; its replies
    put a space or a line break after every call, so the token that completes "</calc>" is ">"."""

    def __init__(self, tokenizer, replies: dict[str, str]):
        self.tokenizer = tokenizer
        self.replies = replies

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        return [self._continue(prompt, sampling) for prompt in prompts]

    def _continue(self, prompt: list[int], sampling: SamplingParams) -> Generation:
        context, _, so_far = self.tokenizer.decode(prompt).rpartition(ASSISTANT)
        reply = next(reply for statement, reply in self.replies.items() if statement in context)
        rest = reply.split(CLOSE, so_far.count(CLOSE))[-1]
        planned = self.tokenizer.encode(rest, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        out: list[int] = []
        for token in planned:
            if len(out) == sampling.max_new_tokens:
                return Generation(out, [LOG_PROB] * len(out), LENGTH)
            out.append(token)
            if any(s in self.tokenizer.decode(out) for s in sampling.stop):
                break
        return Generation(out, [LOG_PROB] * len(out), STOP)


@pytest.fixture(scope="module")
def played(tiny_tokenizer):
    """One rollout of the four cases (one episode each) with at most 2 calls per reply."""
    import_extensions([str(EXAMPLE)], "imports")  # registers "calculator", as `imports=[...]` does
    workflow = make_workflow("calculator", "math", horizon=1, max_calls=2)
    problems = [Problem(uid=uid, domain="math", statement=s, answer=a) for uid, (s, a, _, _) in CASES.items()]
    backend = ScriptedCalculatorUser(tiny_tokenizer, {s: reply for s, _, reply, _ in CASES.values()})
    sampling = SamplingParams(max_new_tokens=200)
    with RolloutManager(workflow, {"reasoner": backend}, tiny_tokenizer, sampling=sampling) as manager:
        groups = asyncio.run(manager.run(problems))
    results = {group.uid: group.episodes[0] for group in groups}
    return workflow, manager, groups, results


def expected_response(tokenizer, case: str) -> tuple[list[int], list[int]]:
    """The response tokens the tool loop must build, g_1 ‖ o_1 ‖ … ‖ g_m, and their generated flags."""
    _, _, reply, observations = CASES[case]
    segments = [part + CLOSE for part in reply.split(CLOSE)[:-1]] + [reply.split(CLOSE)[-1]]
    ids, flags = [], []
    for i, segment in enumerate(segments):
        generated = tokenizer.encode(segment, add_special_tokens=False)
        if i == len(segments) - 1:
            generated.append(tokenizer.eos_token_id)
        ids += generated
        flags += [1] * len(generated)
        if i < len(observations):
            observed = tokenizer.encode(observations[i], add_special_tokens=False)
            ids += observed
            flags += [0] * len(observed)
        elif i < len(segments) - 1:  # the call past the budget: the reply ends after it
            break
    return ids, flags


@pytest.mark.parametrize("case", ["two_calls", "hostile", "wrong_final"])
def test_observations_are_context_token_by_token(played, tiny_tokenizer, case):
    _, _, _, results = played
    [sample] = results[case].samples
    ids, flags = expected_response(tiny_tokenizer, case)
    assert sample.response_ids == ids
    assert sample.generated == flags
    assert sample.rollout_log_probs == [LOG_PROB if f else 0.0 for f in flags]
    assert sample.finish_reason == STOP and sample.response_ids[-1] == tiny_tokenizer.eos_token_id
    _, _, reply, observations = CASES[case]
    observed = [i for i, f in zip(sample.response_ids, sample.generated) if not f]
    assert tiny_tokenizer.decode(observed) == "".join(observations)
    generated = [i for i, f in zip(sample.response_ids, sample.generated) if f]
    assert tiny_tokenizer.decode(generated, skip_special_tokens=True) == reply


def test_the_batch_trains_on_generated_tokens_only(played, tiny_tokenizer):
    _, _, groups, results = played
    batch = to_dataproto(groups, None, 512, 200, tiny_tokenizer.pad_token_id)
    width = batch.batch["responses"].shape[1]
    for row, uid in enumerate(batch.non_tensor_batch["uid"]):
        [sample] = results[uid].samples
        n = len(sample.response_ids)
        assert batch.batch["response_mask"][row, :n].tolist() == sample.generated
        assert batch.batch["response_mask"][row, n:].sum() == 0
        assert batch.batch["attention_mask"][row, -width:][:n].all()  # observations stay in the context


def test_every_call_is_recorded_with_its_outcome(played):
    _, manager, _, results = played
    outcomes = {uid: [c.outcome for c in r.samples[0].tool_calls] for uid, r in results.items()}
    assert outcomes == {
        "two_calls": ["ok", "ok"],
        "hostile": ["invalid", "too_large"],
        "over_budget": ["ok", "ok", "over_budget"],
        "wrong_final": ["ok"],
    }
    assert all(c.tool == "calculator" for r in results.values() for c in r.samples[0].tool_calls)
    assert manager.metrics.tool_calls == 8
    assert manager.metrics.tool_outcomes == {"ok": 5, "invalid": 1, "too_large": 1, "over_budget": 1}
    observed = sum(len(s.generated) - sum(s.generated) for r in results.values() for s in r.samples)
    assert manager.metrics.observation_tokens == observed
    assert observed == sum(c.observation_tokens for r in results.values() for c in r.samples[0].tool_calls)


def test_a_call_past_the_budget_ends_the_reply(played, tiny_tokenizer):
    _, _, _, results = played
    [sample] = results["over_budget"].samples
    ids, flags = expected_response(tiny_tokenizer, "over_budget")
    assert (sample.response_ids, sample.generated) == (ids, flags)
    assert tiny_tokenizer.decode(sample.response_ids).endswith("<calc>84 + 2</calc>")
    action = results["over_budget"].episode.turns[0].actions["reasoner_0"]
    assert action.error == "no '#### <answer>' line"
    assert (results["over_budget"].judgement.team, results["over_budget"].judgement.submission) == (0.0, None)


def test_the_final_answer_is_judged(played):
    results = played[-1]
    judged = {uid: (r.judgement.submission, r.judgement.team) for uid, r in results.items()}
    # wrong_final: the calculator said 144, the reply's final answer 124 is what counts
    assert judged == {
        "two_calls": ("400", 1.0),
        "hostile": ("1000", 1.0),
        "over_budget": (None, 0.0),
        "wrong_final": ("124", 0.0),
    }
    local = {uid: r.judgement.local[0, "reasoner_0"].value for uid, r in results.items()}
    assert local == pytest.approx({"two_calls": 1.0, "hostile": 1.0, "over_budget": 0.0, "wrong_final": 0.2})


@pytest.mark.parametrize(
    ("expression", "observation", "outcome"),
    [
        ("2 + 3 * 4", "14", "ok"),
        ("(2 + 3) * 4", "20", "ok"),
        ("-3 ** 2", "-9", "ok"),
        ("7 / 2", "3.5", "ok"),
        ("7 // 2", "3", "ok"),
        ("-7 % 3", "2", "ok"),
        ("6 / 3", "2", "ok"),
        ("2 ** 0.5", "1.41421356237", "ok"),
        ("10 ** 100", "1" + "0" * 100, "ok"),
        ("1 / 0", "error: division by zero", "undefined"),
        ("(-8) ** 0.5", "error: no real value", "undefined"),
        ("9**9**9**9", "error: exponent over 100", "too_large"),
        ("10 ** 100 + 1", "error: value over 10^100", "too_large"),
        ("1e999", "error: value over 10^100", "too_large"),
        ("__import__('os').system('true')", "error: not an arithmetic expression", "invalid"),
        ("(1).__class__", "error: not an arithmetic expression", "invalid"),
        ("x + 1", "error: not an arithmetic expression", "invalid"),
        ("True + 1", "error: not an arithmetic expression", "invalid"),
        ("'a' * 3", "error: not an arithmetic expression", "invalid"),
        ("2 +", "error: not an arithmetic expression", "invalid"),
        ("1" * 201, "error: longer than 200 characters", "invalid"),
    ],
)
def test_the_calculator_evaluates_arithmetic_only(played, expression, observation, outcome):
    workflow = played[0]
    result = workflow.tool(workflow.agents[0]).run(f"First <calc>{expression}</calc>")
    assert (result.text, result.outcome) == (f" <result>{observation}</result>", outcome)


def test_a_close_without_an_open_is_invalid(played):
    workflow = played[0]
    result = workflow.tool(workflow.agents[0]).run("2 + 2</calc>")
    assert (result.text, result.outcome) == (" <result>error: no <calc> opens this call</result>", "invalid")


def test_it_is_a_single_agent_workflow_with_a_budget_option(played):
    assert workflow_kind("calculator", "math") == "sa"
    assert make_workflow("calculator", "math").tool(played[0].agents[0]).max_calls == 4
    with pytest.raises(ValueError, match="max_calls must be >= 0"):
        make_workflow("calculator", "math", max_calls=-1)
