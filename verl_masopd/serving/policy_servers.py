"""One policy's verl rollout servers: launched under the policy's own names, slept and woken in step.

`PolicyServerManager` is verl's `LLMServerManager` whose replicas name their server actors
`{server_prefix}server_{replica}_{node}` instead of verl's fixed `vllm_server_...`, so several
policies' hybrid replicas (each numbered from 0) live in one Ray job. The workers' side of the
same names is `serving/hybrid_policy.py::PolicyActorRolloutWorker`.

`ColocatedWeightSync` drives verl's `CheckpointEngineManager` (naive backend) with the order
verl's synchronous trainer keeps: servers asleep while the colocated engine computes
log-probs, updates or loads a checkpoint; `update_weights(step)` streams the engine's weights
into the sleeping servers and wakes them (verl's naive sync resumes weights and KV cache).
"""

from __future__ import annotations

from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import get_rollout_replica_class


def with_server_prefix(base: type, server_prefix: str) -> type:
    """A subclass of `base` whose `_get_server_name_prefix()` is `server_prefix`: verl's replica
    classes name their server actors with it, its vLLM `ServerAdapter` looks them up by it."""

    def _get_server_name_prefix(self) -> str:
        return server_prefix

    return type(
        f"{base.__name__}_{server_prefix.strip('_')}", (base,), {"_get_server_name_prefix": _get_server_name_prefix}
    )


class PolicyServerManager(LLMServerManager):
    """verl's server manager for one policy's hybrid worker group, its servers under `server_prefix`.

    replica_class: the replica class to name (default: verl's class for rollout.name, e.g.
    `vLLMReplica`, which imports vllm).
    """

    def __init__(
        self,
        config,
        worker_group=None,
        rollout_resource_pool=None,
        *,
        server_prefix: str,
        replica_class: type | None = None,
        **kwargs,
    ):
        rollout = config.actor_rollout_ref.rollout
        base = replica_class or get_rollout_replica_class(rollout.name, disaggregation_enabled=False)
        self.rollout_replica_class = with_server_prefix(base, server_prefix)
        super().__init__(config, worker_group, rollout_resource_pool, **kwargs)


def replica_servers(manager: LLMServerManager) -> list:
    """The server actors of a server manager's replicas."""
    return [server for replica in manager.get_replicas() for server in replica.servers]


def server_actors(manager: LLMServerManager) -> list:
    """Every Ray actor a server manager started: its replicas' servers and its load balancer."""
    return replica_servers(manager) + [manager.global_load_balancer]


class ColocatedWeightSync:
    """verl's `CheckpointEngineManager` for one policy plus whether its servers are awake.

    Freshly created servers are awake; `sleep_replicas` frees their GPU memory (a no-op when
    already asleep); `update_weights(step)` puts them to sleep first if needed, syncs, and
    leaves them awake serving the weights of `step`.
    """

    def __init__(self, checkpoint_manager):
        self.checkpoint_manager = checkpoint_manager
        self.awake = True

    def sleep_replicas(self) -> None:
        if self.awake:
            self.checkpoint_manager.sleep_replicas()
            self.awake = False

    def update_weights(self, step: int) -> None:
        self.sleep_replicas()
        self.checkpoint_manager.update_weights(step)
        self.awake = True
