"""The vllm path's driver logic against CPU stand-ins that keep verl's rules: servers asleep while
the colocated engine computes, weights synced only into sleeping servers, generate while asleep
fails, every response stamped with the last synced step; server names per policy."""

from __future__ import annotations

import asyncio

import pytest
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from verl_masopd.config import compose_config
from verl_masopd.config.run import ServingSection, TrainerSection
from verl_masopd.config.validate import composed_record, read_fields
from verl_masopd.engine.policy_engine import EngineSettings
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.records import FAILED, STOP
from verl_masopd.serving.hybrid_policy import HybridPolicy, HybridPolicyEngine
from verl_masopd.serving.plans import plan_policy_serving
from verl_masopd.serving.policy_servers import ColocatedWeightSync, PolicyServerManager
from verl_masopd.serving.server_backend import VerlServerBackend

EOS = 2


class Servers:
    """One policy's replicas: the client's and the checkpoint manager's view of them."""

    def __init__(self):
        self.asleep = False
        self.global_steps = None
        self.calls: list[str] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if self.asleep:
            raise RuntimeError("generate while the replicas sleep")
        tokens = [7, EOS][: sampling_params["max_tokens"]]
        log_probs = [-0.5] * len(tokens) if sampling_params.get("logprobs") else None
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def sleep_replicas(self):
        self.calls.append("sleep")
        self.asleep = True

    def update_weights(self, global_steps=None):
        if not self.asleep:
            raise RuntimeError("naive update_weights needs the replicas asleep")
        self.calls.append(f"update_weights({global_steps})")
        self.global_steps = global_steps
        self.asleep = False


class HybridWorkers:
    """verl's worker-group calls: compute methods return the concatenated result, ONE_TO_ALL
    methods one result per rank; the actor needs the GPU memory the servers free."""

    def __init__(self, servers: Servers):
        self.servers = servers
        self.calls: list[str] = []

    def _compute(self, name):
        if not self.servers.asleep:
            raise RuntimeError(f"{name} while the colocated vLLM servers hold the GPU")
        self.calls.append(name)
        return name

    def compute_log_prob(self, td):
        return self._compute("compute_log_prob")

    def update_actor(self, td):
        return self._compute("update_actor")

    def load_checkpoint(self, path, del_local_after_load=False):
        return [self._compute("load_checkpoint"), None]

    def save_checkpoint(self, path, global_step=0):
        self.calls.append("save_checkpoint")
        return [None, None]


@pytest.fixture
def policy(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    servers = Servers()
    sync = ColocatedWeightSync(servers)
    engine = HybridPolicyEngine(EngineSettings(model_path=str(model)), HybridWorkers(servers), sync)
    backend = VerlServerBackend(servers, [EOS], checkpoint_manager=sync, name="coder")
    policy = HybridPolicy("coder", engine, backend, loss_fn=None, num_mini_batches=1)
    return policy, servers


def generate(policy):
    return asyncio.run(policy.backend.generate([[5, 6]], SamplingParams(max_new_tokens=4)))[0]


def test_a_step_keeps_verls_order(policy):
    policy, servers = policy
    policy.sync(0)
    assert servers.calls == ["sleep", "update_weights(0)"]
    first = generate(policy)
    assert (first.token_ids, first.finish_reason) == ([7, EOS], STOP)
    assert policy.engine._call("infer_batch", "td") == "compute_log_prob"
    assert generate(policy).finish_reason == FAILED, "asleep servers answer nothing"
    assert policy.engine._call("train_mini_batch", "td") == "update_actor"
    policy.sync(1)
    assert servers.calls == ["sleep", "update_weights(0)", "sleep", "update_weights(1)"]
    assert policy.backend.version == 1 and servers.global_steps == 1
    assert generate(policy).finish_reason == STOP


def test_a_policy_without_rows_still_syncs_into_sleeping_servers(policy):
    policy, servers = policy
    policy.sync(0)
    policy.sync(1)
    assert servers.calls == ["sleep", "update_weights(0)", "sleep", "update_weights(1)"]


def test_resume_loads_with_servers_asleep_then_serves_the_checkpoint_step(policy, tmp_path):
    policy, servers = policy
    policy.sync(0)
    policy.save(tmp_path, 3)
    policy.load(tmp_path, 3)
    assert policy.engine._worker.calls == ["save_checkpoint", "load_checkpoint"]
    assert servers.global_steps == 3 and not servers.asleep


class NamedReplica(RolloutReplica):
    """Launches nothing; records the server actor name verl's vLLMReplica would give."""

    async def launch_servers(self):
        self._server_handle = None
        self._server_address = f"{self._get_server_name_prefix()}server_{self.replica_rank}_0"

    def _get_server_name_prefix(self) -> str:
        return "vllm_"


class Workers:
    def __init__(self, n):
        self.workers = [f"worker{i}" for i in range(n)]
        self.world_size = n


def test_each_policys_replicas_start_at_rank_zero_under_its_own_names(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    settings = EngineSettings(model_path=str(tmp_path))
    cfg = compose_config(
        [
            "students.path=/m",
            "data.train_files=/d",
            "engines.gpus_per_engine=2",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        ]
    )
    rollout = read_fields(cfg, "actor_rollout_ref.rollout", ServingSection)
    trainer = read_fields(cfg, "trainer", TrainerSection)
    addresses = {}
    for i, name in enumerate(["coder", "tester"]):
        serving = plan_policy_serving(composed_record(cfg), rollout, trainer, 2, name, i, settings)
        manager = PolicyServerManager(
            serving.config, Workers(2), server_prefix=serving.server_prefix, replica_class=NamedReplica
        )
        asyncio.run(manager._initialize_llm_servers())
        assert [r.replica_rank for r in manager.get_replicas()] == [0, 1]
        assert [r.workers for r in manager.get_replicas()] == [["worker0"], ["worker1"]]
        addresses[name] = manager.server_addresses
        assert addresses[name] == serving.server_names()
    assert addresses == {
        "coder": ["vllm_coder_server_0_0", "vllm_coder_server_1_0"],
        "tester": ["vllm_tester_server_0_0", "vllm_tester_server_1_0"],
    }
