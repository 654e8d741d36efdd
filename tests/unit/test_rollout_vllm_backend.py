"""VerlServerBackend against a stand-in for verl's server-manager client that enforces the real
rules of verl 0.9.1's vLLM servers and returns verl's own TokenOutput."""

from __future__ import annotations

import asyncio

import pytest
from verl.workers.rollout.replica import TokenOutput

from verl_masopd.rollout.backend import SamplingParams, request_seed
from verl_masopd.serving.server_backend import VerlServerBackend

EOS = 2
MAX_MODEL_LEN = 16


class StandInServer:
    """Answers prompt p with p[0] tokens 100, 101, … then eos, cut at max_tokens."""

    def __init__(self):
        self.asleep = False
        self.global_steps = None
        self.seen_params: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if self.asleep:
            raise RuntimeError("generate called while the replicas sleep")
        if len(prompt_ids) >= MAX_MODEL_LEN:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens >= max_model_len {MAX_MODEL_LEN}")
        if sampling_params.get("n", 1) != 1:
            raise ValueError("n must be 1")
        self.seen_params.append(dict(sampling_params))
        tokens = ([100 + i for i in range(prompt_ids[0])] + [EOS])[: sampling_params["max_tokens"]]
        log_probs = [-0.1 * (i + 1) for i in range(len(tokens))] if sampling_params.get("logprobs") else None
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


class StandInCheckpointManager:
    def __init__(self, server):
        self.server = server

    def update_weights(self, global_steps=None):
        self.server.global_steps = global_steps
        self.server.asleep = False

    def sleep_replicas(self):
        self.server.asleep = True

    def wake_up_replicas(self):
        self.server.asleep = False


@pytest.fixture
def server():
    return StandInServer()


async def test_tokens_log_probs_and_finish_reasons(server):
    backend = VerlServerBackend(server, [EOS])
    gens = await backend.generate([[2, 9], [5, 9, 9]], SamplingParams(0.6, 0.95, 20, max_new_tokens=4))
    assert [(g.token_ids, g.finish_reason) for g in gens] == [
        ([100, 101, EOS], "stop"),
        ([100, 101, 102, 103], "length"),
    ]
    assert gens[0].log_probs == pytest.approx([-0.1, -0.2, -0.3])
    assert server.seen_params[0] == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_tokens": 4, "logprobs": True}


async def test_a_seeded_call_gives_each_request_its_own_vllm_seed(server):
    backend = VerlServerBackend(server, [EOS], version=3)
    await backend.generate([[2, 9], [5, 9, 9]], SamplingParams(max_new_tokens=4, seed=77))
    assert [p["seed"] for p in server.seen_params] == [request_seed(3, 77, 0), request_seed(3, 77, 1)]
    assert len({p["seed"] for p in server.seen_params}) == 2


async def test_over_long_prompt_fails_alone(server):
    backend = VerlServerBackend(server, [EOS])
    gens = await backend.generate([[1] * MAX_MODEL_LEN, [1]], SamplingParams(max_new_tokens=8))
    assert [(g.token_ids, g.finish_reason) for g in gens] == [([], "failed"), ([100, EOS], "stop")]


async def test_weight_sync_and_stale_responses(server):
    manager = StandInCheckpointManager(server)
    backend = VerlServerBackend(server, [EOS], checkpoint_manager=manager)
    backend.update_weights({}, 3)
    assert server.global_steps == 3 and backend.version == 3
    [gen] = await backend.generate([[1]], SamplingParams())
    assert gen.finish_reason == "stop"
    server.global_steps = 2  # a replica that missed the sync
    [gen] = await backend.generate([[1]], SamplingParams())
    assert gen.finish_reason == "failed"
    server.global_steps = 4  # the policy synced while the request ran (the rollout beside the update)
    [gen] = await backend.generate([[1]], SamplingParams())
    assert gen.finish_reason == "stop"


async def test_a_sync_while_a_request_runs_judges_its_answer_by_the_weights_of_its_sending(server):
    """The rollout beside the update: the policy syncs to 4 while a request sent at 3 runs; the
    servers answer it from 3 (finished before the load) or from 4, both usable; one sent after
    the sync and answered from 3 is stale."""
    backend = VerlServerBackend(server, [EOS], checkpoint_manager=StandInCheckpointManager(server))
    backend.update_weights({}, 3)
    arrived, answer = asyncio.Event(), asyncio.Event()
    inner = server.generate

    async def slow(request_id, **kwargs):
        arrived.set()
        await answer.wait()
        return await inner(request_id, **kwargs)

    server.generate = slow
    for answered_from in (3, 4):
        backend.update_weights({}, 3)
        arrived.clear()
        answer.clear()
        running = asyncio.ensure_future(backend.generate([[1]], SamplingParams()))
        await arrived.wait()
        backend.update_weights({}, 4)
        server.global_steps = answered_from
        answer.set()
        [gen] = await running
        assert gen.finish_reason == "stop", answered_from
    server.global_steps = 3
    [gen] = await backend.generate([[1]], SamplingParams())
    assert gen.finish_reason == "failed"


async def test_generate_while_asleep_fails_until_weights_are_synced(server):
    backend = VerlServerBackend(server, [EOS], checkpoint_manager=StandInCheckpointManager(server), version=0)
    server.global_steps = 0
    backend.sleep()
    [gen] = await backend.generate([[1]], SamplingParams())
    assert gen.finish_reason == "failed"
    backend.update_weights({}, 1)
    [gen] = await backend.generate([[1]], SamplingParams())
    assert (gen.token_ids, gen.finish_reason) == ([100, EOS], "stop")


async def test_missing_log_probs_rejected():
    class NoLogProbs(StandInServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            out = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
            return TokenOutput(token_ids=out.token_ids, log_probs=None, extra_fields=out.extra_fields)

    [gen] = await VerlServerBackend(NoLogProbs(), [EOS]).generate([[1]], SamplingParams())
    assert gen.finish_reason == "failed"


def test_update_without_checkpoint_manager_is_an_error(server):
    with pytest.raises(RuntimeError, match="no checkpoint manager"):
        VerlServerBackend(server, [EOS]).update_weights({}, 1)


class HungServer(StandInServer):
    async def generate(self, request_id, **kwargs):
        await asyncio.sleep(3600)


async def test_a_hung_server_is_an_error_naming_it():
    backend = VerlServerBackend(HungServer(), [EOS], name="coder", servers="vllm_coder_server_0_0", timeout_s=0.05)
    with pytest.raises(
        TimeoutError, match=r"coder: request coder-\w+ unanswered by vllm_coder_server_0_0 within 0.05s"
    ):
        await backend.generate([[3, 4]], SamplingParams(max_new_tokens=4))


async def test_stop_strings_reach_the_servers_and_a_reply_ended_at_one_is_stopped(server):
    class StopsAtACall(StandInServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            out = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
            if "stop" in sampling_params:  # as vLLM does: the token completing the stop string ends the reply
                out.token_ids, out.log_probs = out.token_ids[:2], out.log_probs[:2]
            return out

    stops = StopsAtACall()
    backend = VerlServerBackend(stops, [EOS])
    [gen] = await backend.generate([[5, 9]], SamplingParams(max_new_tokens=4, stop=("</search>",)))
    assert (gen.token_ids, gen.finish_reason) == ([100, 101], "stop")
    assert stops.seen_params[0]["stop"] == ["</search>"]
    [plain] = await backend.generate([[5, 9]], SamplingParams(max_new_tokens=4))
    assert plain.finish_reason == "length" and "stop" not in stops.seen_params[1]
