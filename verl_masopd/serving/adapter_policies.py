"""LoRA policies on the vllm path: one vLLM server per base model, one adapter per policy.

With LoRA on (config/lora.py), every policy's engine is the project's verl `TrainingWorker`
(as on the hf path) and its generation is served by the standalone vLLM servers of its base
model, shared by every policy that starts from that base (vLLM's multi-LoRA):

    | what              | full fine-tuning (hybrid_policy.py)     | LoRA (this module)                    |
    |-------------------|-----------------------------------------|---------------------------------------|
    | servers           | one set per policy, colocated with its  | one set per base model, standalone    |
    |                   | hybrid worker                           | (GPUs of their own, as the teacher's) |
    | a request         | the policy's servers                    | its base's servers, `adapter=policy`  |
    | weight sync       | every weight, worker to server          | the adapter's PEFT files only, engine |
    |                   | (verl's checkpoint engine)              | → driver → each server (`AdapterSync`)|

`AdapterServer` starts one base's servers (serving/adapter_servers.py) with `max_loras` = its
policies and `max_lora_rank` = vLLM's allowed rank at or above their largest rank.
`AdapterClient` is verl's server client with every request routed to one adapter, so the
rollout backend (`VerlServerBackend`) and the prompt log-prob scorer run over it unchanged.
After each update `AdapterSync.update_weights(step)` sends the adapter (a few MB: rank r adds
r · (d_in + d_out) per adapted matrix) to every server of the base; each response then carries
the adapter's step, which the backend checks. The servers need nothing of the engines, so with
rollout.max_off_policy >= 1 they keep serving the next rollouts through every update and sync
(trainer/background_rollout.py).
"""

from __future__ import annotations

from verl_masopd.config.run import RunConfig
from verl_masopd.engine.policy import ServedPolicy
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.serving.hybrid_policy import eos_ids_of
from verl_masopd.serving.plans import plan_adapter_serving
from verl_masopd.serving.policy_servers import PolicyServerManager, replica_servers, server_actors
from verl_masopd.serving.server_backend import VerlServerBackend
from verl_masopd.serving.vllm_cpu import call_timeout_s


class AdapterClient:
    """verl's server client (`generate(request_id, *, prompt_ids, sampling_params)`) with every
    request routed to `adapter`."""

    def __init__(self, client, adapter: str):
        self.client = client
        self.adapter = adapter

    async def generate(self, request_id, **kwargs):
        return await self.client.generate(request_id, adapter=self.adapter, **kwargs)


class AdapterServer:
    """One base model's standalone vLLM servers with a LoRA slot per policy; `close` stops them.

    name: a name unique among the run's servers (its actors are `vllm_{name}_server_...`);
    ranks: each policy's LoRA rank."""

    def __init__(self, run: RunConfig, model_path: str, dtype: str, ranks: dict[str, int], name: str):
        from verl.workers.rollout.vllm_rollout.utils import get_vllm_max_lora_rank

        from verl_masopd.serving.adapter_servers import adapter_replica_class

        max_rank = get_vllm_max_lora_rank(max(ranks.values()))
        device = run.trainer.device
        config = plan_adapter_serving(run.composed, run.serving, device, model_path, dtype, len(ranks), max_rank)
        self.manager = PolicyServerManager.create(
            config, server_prefix=f"vllm_{name}_", replica_class=adapter_replica_class(device, name)
        )
        self.servers = replica_servers(self.manager)
        self.client = self.manager.get_client()
        self.name = name

    def load(self, policy: str, files: dict[str, bytes], version: int) -> None:
        """Every server serves `files` as `policy`'s adapter at step `version`."""
        import ray

        calls = [server.load_adapter.remote(policy, files, version) for server in self.servers]
        try:
            ray.get(calls, timeout=call_timeout_s())
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"{self.name}: the vLLM servers did not load {policy}'s adapter within {call_timeout_s():g}s"
            ) from None

    def close(self) -> None:
        import ray

        for actor in server_actors(self.manager):
            ray.kill(actor)


class AdapterSync:
    """The weight sync of one LoRA policy (`VerlServerBackend`'s checkpoint manager): the
    engine's adapter files to its base's servers. The servers are standalone, so the engine's
    calls need nothing of theirs freed (`sleep_replicas` does nothing)."""

    def __init__(self, engine: PolicyEngine, server: AdapterServer, policy: str):
        self.engine = engine
        self.server = server
        self.policy = policy

    def update_weights(self, version: int) -> None:
        self.server.load(self.policy, self.engine.adapter_files(), version)

    def sleep_replicas(self) -> None:
        """Nothing to free: the servers hold no memory of the engine's."""


def build_adapter_policies(
    run: RunConfig,
    settings: dict[str, EngineSettings],
    engines: dict[str, PolicyEngine],
    loss_fn,
    num_mini_batches: int,
) -> tuple[dict[str, ServedPolicy], list[AdapterServer]]:
    """Every LoRA policy over its base's `AdapterServer` (one per distinct `model_path`), each
    serving its engine's initial adapter as version 0; and the servers, for the caller to close."""
    bases: dict[str, dict[str, int]] = {}
    for name, s in settings.items():
        bases.setdefault(s.model_path, {})[name] = s.lora.rank
    servers = {
        path: AdapterServer(run, path, next(iter(settings.values())).dtype, ranks, f"adapters{i}")
        for i, (path, ranks) in enumerate(bases.items())
    }
    policies = {}
    for name, s in settings.items():
        server = servers[s.model_path]
        backend = VerlServerBackend(
            AdapterClient(server.client, name),
            eos_ids_of(s.model_path),
            checkpoint_manager=AdapterSync(engines[name], server, name),
            name=name,
            servers=f"{server.name} (adapter {name})",
        )
        policies[name] = ServedPolicy(name, engines[name], backend, loss_fn, num_mini_batches)
        policies[name].sync(0)
    return policies, list(servers.values())
