"""The vLLM classes of the CPU path (imports vllm): see `vllm_cpu` for why each one exists."""

from __future__ import annotations

import os

import ray
import torch
from safetensors.torch import save_file
from verl.workers.rollout.replica import RolloutMode
from verl.workers.rollout.vllm_rollout import ServerAdapter
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from verl_masopd.serving.vllm_cpu import (
    KVCACHE_ENV,
    LOOPBACK,
    call_timeout_s,
    remove_dir,
    server_env,
    start_timeout_s,
    weights_dir,
    within,
)


class CpuVllmHttpServer(vLLMHttpServer):
    """verl's vLLM server, serving HTTP on 127.0.0.1; without sleep mode a wake-up only drops the
    prefix cache (KV computed under the previous weights)."""

    def _post_init(self, cuda_visible_devices: str) -> None:
        self._server_address = LOOPBACK
        super()._post_init(cuda_visible_devices)

    async def wake_up(self, tags: list[str] | None = None):
        if self.config.enable_sleep_mode:
            return await super().wake_up(tags)
        if self.node_rank == 0:
            await self.engine.reset_prefix_cache(reset_connector=True)


class CpuVllmReplica(vLLMReplica):
    """verl's vLLM replica on one CPU node: one `CpuVllmHttpServer`, started with the vLLM CPU
    settings, every call timed out; standalone (a teacher) without a GPU resource pool."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CpuVllmHttpServer)

    def server_name(self) -> str:
        kind = "server_reward_" if self.is_reward_model else "server_teacher_" if self.is_teacher_model else "server_"
        return f"{self._get_server_name_prefix()}{kind}{self.replica_rank}_0{self.name_suffix}"

    async def init_standalone(self):
        self.rollout_mode = RolloutMode.STANDALONE
        await self.launch_servers()

    async def launch_servers(self):
        if self.nnodes != 1:
            raise ValueError(f"a vLLM replica on CPU runs on one node, this one spans {self.nnodes}")
        name, env = self.server_name(), server_env()
        server = self.server_class.options(
            runtime_env={"env_vars": env}, name=name, num_cpus=0, max_concurrency=self.max_concurrency
        ).remote(
            config=self.config,
            model_config=self.model_config,
            rollout_mode=self.rollout_mode,
            workers=self.workers,
            replica_rank=self.replica_rank,
            node_rank=0,
            gpus_per_node=self.gpus_per_replica_node,
            nnodes=1,
            cuda_visible_devices="",
        )
        self.servers = [server]
        try:
            await within(server.launch_server.remote(), start_timeout_s(), f"vLLM server {name} start")
        except Exception as e:
            ray.kill(server)
            raise RuntimeError(
                f"vLLM server {name} did not start ({KVCACHE_ENV}={env[KVCACHE_ENV]} GiB of KV cache; lower it "
                f"when memory is short, raise it when the model's max_model_len does not fit): {e}"
            ) from e
        address, port = await within(server.get_server_address.remote(), call_timeout_s(), f"vLLM server {name}")
        self._server_handle = server
        self._server_address = f"{address}:{port}"

    async def sleep(self):
        await within(super().sleep(), call_timeout_s(), f"vLLM server {self.server_name()} sleep")

    async def wake_up(self):
        await within(super().wake_up(), call_timeout_s(), f"vLLM server {self.server_name()} wake_up")

    async def clear_kv_cache(self):
        await within(super().clear_kv_cache(), call_timeout_s(), f"vLLM server {self.server_name()} clear_kv_cache")


class CpuServerAdapter(ServerAdapter):
    """verl's worker-side vLLM adapter whose weight sync writes the engine's weights to a
    safetensors file and has the server load it with vLLM's `reload_weights`."""

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int | None = None, wire_format="named_tensors", **kwargs):
        if wire_format != "named_tensors":
            # delta_sharded transfer relies on CUDA IPC, which a CPU host does not have
            raise ValueError(f"weight sync on CPU takes wire_format named_tensors (full tensors), got {wire_format!r}")
        # every rank consumes the generator: gathering a sharded weight is a collective
        state = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in weights}
        if not self._ensure_server_handle():
            return
        name, timeout = self.server_name(), call_timeout_s()
        folder = weights_dir(self._get_server_name_prefix())
        try:
            save_file(state, os.fspath(folder / "model.safetensors"))
            reload = self.server_handle.collective_rpc.remote(
                "reload_weights", timeout=timeout, kwargs={"weights_path": os.fspath(folder)}
            )
            await within(reload, timeout, f"vLLM server {name} reload_weights")
        finally:
            remove_dir(folder)
        await within(self.server_handle.clear_kv_cache.remote(), timeout, f"vLLM server {name} clear_kv_cache")
        if global_steps is not None:
            await within(
                self.server_handle.set_global_steps.remote(global_steps),
                timeout,
                f"vLLM server {name} set_global_steps",
            )

    async def resume(self, tags: list[str]):
        if self.config.free_cache_engine and self._ensure_server_handle():
            await within(self.server_handle.wake_up.remote(tags=tags), call_timeout_s(), self.server_name())

    async def release(self):
        if self.config.free_cache_engine and self._ensure_server_handle():
            await within(self.server_handle.sleep.remote(), call_timeout_s(), self.server_name())

    def server_name(self) -> str:
        return f"{self._get_server_name_prefix()}server_{self.replica_rank}_{self.node_rank}"
