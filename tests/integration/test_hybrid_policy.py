"""The vllm generation path's policies on CPU: verl's hybrid `ActorRolloutRefWorker`, server manager,
load balancer, client and `CheckpointEngineManager` as they are, with only the inference server
replaced by the stand-in of verl_server_stand_in.py (an HF model that keeps vLLM's sleep and
weight-loading rules). Two policies run side by side, each with its own pool, workers and servers."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.records import FAILED, LENGTH, STOP
from verl_masopd.trainer.engine import EngineSettings, policy_loss
from verl_masopd.trainer.hybrid_policy import build_vllm_policy
from verl_masopd.trainer.vllm_policy_config import plan_policy_serving

pytestmark = pytest.mark.integration

POLICIES = ("coder", "tester")
SYNC = ["sleep", "wake_up(weights)", "load_weights", "clear_kv_cache", "wake_up(kv_cache)"]
PROMPTS = [[5, 6, 7], [9, 10]]


@pytest.fixture(scope="module")
def hybrid(ray_local, tiny_model_path):
    """Both policies built by `build_vllm_policy` from the config the trainer would use, plus a
    handle on each policy's server and its initial weights."""
    sys.path.insert(0, str(Path(__file__).parent))
    importlib.import_module("verl_server_stand_in").register_replica()
    cfg = compose_config(
        [
            "preset=cpu",
            f"students.path={tiny_model_path}",
            "data.train_files=/unused",
            "engines.gpus_per_engine=1",
            "actor_rollout_ref.rollout.name=stand_in",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        ]
    )
    policies, servers = {}, {}
    for i, name in enumerate(POLICIES):
        settings = EngineSettings(model_path=tiny_model_path, lr=1e-2, seed=i)
        policies[name] = build_vllm_policy(plan_policy_serving(cfg, name, i, settings), settings, policy_loss(), 1)
        servers[name] = ray_local.get_actor(f"vllm_{name}_server_0_0")
    return policies, servers


def generate(policy, max_new_tokens=6):
    return asyncio.run(policy.backend.generate(PROMPTS, SamplingParams(max_new_tokens=max_new_tokens)))


def served_weights(server) -> dict[str, torch.Tensor]:
    import ray

    return ray.get(server.state_dict.remote())


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name].float(), b[name].float(), atol=0, rtol=0, msg=name)


def test_each_policy_starts_serving_its_engine_weights_under_its_own_server_names(hybrid, ray_local):
    policies, servers = hybrid
    for name in POLICIES:
        assert ray_local.get(servers[name].history.remote()) == SYNC, "verl's naive sync: asleep, weights, kv"
        assert_same_weights(served_weights(servers[name]), policies[name].engine.hf_state_dict())
        assert policies[name].backend.version == 0
    with pytest.raises(ValueError, match="Failed to look up actor"):
        ray_local.get_actor("vllm_server_0_0")


def test_a_step_through_the_hybrid_worker_and_a_checkpoint_round_trip(
    hybrid, ray_local, tiny_model_path, make_policy_batch, hf_log_probs, tmp_path
):
    policies, servers = hybrid
    coder, tester = policies["coder"], policies["tester"]
    tester_weights = served_weights(servers["tester"])

    generations = generate(coder)
    assert all(g.finish_reason in (STOP, LENGTH) and len(g.log_probs) == len(g.token_ids) for g in generations)

    batch = make_policy_batch([5, 3, 4, 5], [4, 2, 4, 3], seed=4)
    log_probs = coder.engine.infer_batch(batch)  # verl's compute_log_prob, servers put to sleep first
    torch.testing.assert_close(log_probs, hf_log_probs(tiny_model_path, batch), atol=1e-4, rtol=0)
    assert all(g.finish_reason == FAILED for g in generate(coder)), "asleep servers serve nothing"

    before = coder.engine.hf_state_dict()
    metrics = coder.update(batch)  # verl's update_actor
    after = coder.engine.hf_state_dict()
    assert metrics["coder/grad_norm"] > 0
    assert not torch.equal(before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"])

    coder.sync(1)
    assert_same_weights(served_weights(servers["coder"]), after)
    assert all(g.finish_reason in (STOP, LENGTH) for g in generate(coder)), "version 1 answers"
    assert_same_weights(served_weights(servers["tester"]), tester_weights)
    assert tester.backend.version == 0
    assert ray_local.get(servers["tester"].history.remote()) == SYNC, "the other policy's servers untouched"

    coder.save(tmp_path, 1)
    assert (tmp_path / "huggingface" / "config.json").is_file(), "checkpoints carry an HF copy of the weights"
    coder.update(batch)
    coder.load(tmp_path, 1)
    assert_same_weights(coder.engine.hf_state_dict(), after)
    assert_same_weights(served_weights(servers["coder"]), after)
    assert coder.backend.version == 1
    assert all(g.finish_reason in (STOP, LENGTH) for g in generate(coder))
