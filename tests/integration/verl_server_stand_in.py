"""A CPU stand-in for verl's vLLM rollout server and its worker-side adapter, keeping vLLM's rules.

Only the inference engine is replaced: verl's hybrid `ActorRolloutRefWorker`, server manager,
load balancer, client and `CheckpointEngineManager` run as they are. Registered under the rollout
name `stand_in`: the replica class in the driver (`register_replica`), the worker-side adapter in
every Ray worker (`register_rollout`, a Ray `worker_process_setup_hook`).

The server (`StandInServer`, a named Ray actor `{prefix}server_{replica}_0`) runs the Hugging
Face model on CPU and enforces what vLLM's colocated server does: `sleep` discards the weights
(vLLM's level-2 sleep), `wake_up(tags)` maps memory back, weights load only while mapped,
generation needs weights and KV cache awake and weights loaded since the last sleep, every output
carries the step of the last `set_global_steps`, log-probs only when asked, `max_tokens`
respected, a prompt at `max_model_len` raises.
"""

from __future__ import annotations

import os

import ray
import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "stand_in"
WEIGHTS, KV_CACHE = "weights", "kv_cache"


class StandInServer:
    """One replica's server: an HF model behind vLLM's server rules."""

    def __init__(self, model_path: str, seed: int, max_model_len: int):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
        self.max_model_len = max_model_len
        self.generator = torch.Generator().manual_seed(seed)
        self.awake = {WEIGHTS, KV_CACHE}
        self.weights_loaded = True
        self.global_steps = None
        self.events: list[str] = []

    def sleep(self) -> None:
        self.events.append("sleep")
        self.awake.clear()
        self.weights_loaded = False

    def wake_up(self, tags: list[str] | None = None) -> None:
        tags = [WEIGHTS, KV_CACHE] if tags is None else tags
        self.events.append(f"wake_up({','.join(tags)})")
        self.awake.update(tags)

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        if WEIGHTS not in self.awake:
            raise RuntimeError("weights loaded into a sleeping server")
        self.model.load_state_dict(state_dict, strict=True)
        self.weights_loaded = True
        self.events.append("load_weights")

    def clear_kv_cache(self) -> None:
        self.events.append("clear_kv_cache")

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in self.model.state_dict().items()}

    def history(self) -> list[str]:
        return list(self.events)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        if not {WEIGHTS, KV_CACHE} <= self.awake or not self.weights_loaded:
            raise RuntimeError(f"generate on a server without weights or KV cache (awake: {sorted(self.awake)})")
        if len(prompt_ids) >= self.max_model_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens reaches max_model_len {self.max_model_len}")
        if sampling_params.get("top_p", 1.0) != 1.0:
            raise ValueError("the stand-in samples with temperature and top_k only")
        temperature, top_k = float(sampling_params.get("temperature", 1.0)), int(sampling_params.get("top_k", -1))
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        tokens, log_probs = list(prompt_ids), []
        with torch.no_grad():
            for _ in range(int(sampling_params["max_tokens"])):
                logits = self.model(torch.tensor([tokens])).logits[0, -1].float()
                if temperature == 0:
                    token = int(logits.argmax())
                    log_probs.append(float(torch.log_softmax(logits, -1)[token]))
                else:
                    logits = logits / temperature
                    if top_k > 0:
                        cut = torch.topk(logits, top_k).values[-1]
                        logits = logits.masked_fill(logits < cut, float("-inf"))
                    dist = torch.log_softmax(logits, -1)
                    token = int(torch.multinomial(dist.exp(), 1, generator=self.generator))
                    log_probs.append(float(dist[token]))
                tokens.append(token)
                if token in eos_ids:
                    break
        return TokenOutput(
            token_ids=tokens[len(prompt_ids) :],
            log_probs=log_probs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


class StandInReplica(RolloutReplica):
    """verl's replica for one stand-in server per replica (one node), launched under the replica's
    server-name prefix, the name the worker-side adapter looks up."""

    async def launch_servers(self):
        name = f"{self._get_server_name_prefix()}server_{self.replica_rank}_0"
        max_model_len = self.config.max_model_len or self.config.prompt_length + self.config.response_length
        server = (
            ray.remote(StandInServer)
            .options(name=name, num_cpus=0)
            .remote(self.model_config.path, self.config.seed + self.replica_rank, max_model_len)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = name

    def _get_server_name_prefix(self) -> str:
        return f"{self.config.name}_"


class StandInRollout(BaseRollout):
    """The worker-side adapter (vLLM's `ServerAdapter` in verl): finds its replica's server by
    name, wakes and sleeps it, streams the engine's weights into it."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        rank = int(os.environ["RANK"])
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.has_server = rank % world == 0

    def _get_server_name_prefix(self) -> str:
        return f"{self.config.name}_"

    def _server(self):
        return ray.get_actor(f"{self._get_server_name_prefix()}server_{self.replica_rank}_0")

    async def resume(self, tags: list[str]):
        if self.config.free_cache_engine and self.has_server:
            await self._server().wake_up.remote(tags=tags)

    async def release(self):
        if self.config.free_cache_engine and self.has_server:
            await self._server().sleep.remote()

    async def update_weights(self, weights, global_steps: int | None = None, wire_format="named_tensors", **kwargs):
        state = {name: tensor.detach().to("cpu", torch.float32, copy=True) for name, tensor in weights}
        if self.has_server:
            server = self._server()
            await server.load_weights.remote(state)
            await server.clear_kv_cache.remote()
            if global_steps is not None:
                await server.set_global_steps.remote(global_steps)


def register_replica() -> None:
    """The replica class under NAME in this (the driver's) process."""
    RolloutReplicaRegistry.register(NAME, lambda: StandInReplica)


def register_rollout() -> None:
    """The worker-side adapter under (NAME, async) in this process (a Ray worker's setup hook)."""
    rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.StandInRollout"
