"""vLLM servers that serve one base model with a LoRA adapter per policy (imports vllm).

verl's `vLLMHttpServer` serves at most one adapter, under the fixed id 123, and routes every
request to it. `AdapterRouting` turns a server of the base model into a multi-LoRA one:

    load_adapter(name, files, version)   writes the adapter's PEFT files (name → bytes) to a
                                         folder of the server's and loads them into vLLM under
                                         `name` (`add_lora`, in place over the previous version)
    generate(..., adapter=name)          verl's generate with the request routed to `name`'s
                                         adapter at its version v when the request arrives; the
                                         response carries v as `global_steps`, so each policy
                                         checks its own weights

vLLM's LoRA settings (`enable_lora`, `max_loras` ≥ the adapters, `max_lora_rank`) come from the
server's config copy (serving/plans.py::plan_adapter_serving), through verl's
`rollout.engine_kwargs.vllm`, with verl's own single-adapter LoRA off (`model.lora_rank` 0).

Routing: verl's generate calls `self.engine.generate(..., lora_request=None)`; the engine is
wrapped (`RoutedEngine`) so that a request without a LoRA request takes the one of the adapter
named for the request being served (a context variable set by `generate`, local to the request's
task), and its prompt the cache salt "name@v". vLLM keys prefix-cache blocks by adapter name,
not weights; the salt keys them by version too, so a request never reads KV blocks computed by
an older version of its adapter, even when a load lands while others run (the rollout beside the
update, trainer/background_rollout.py: vLLM applies `add_lora` between two engine steps, the
requests in flight of that adapter go on with the new weights and those of the other adapters
are untouched). The blocks of older versions are never hit again and age out of vLLM's LRU.
Every request to an adapter server names an adapter: vLLM on CPU mis-serves requests to
the base model batched with LoRA requests (benchmarks/vllm_lora_cpu.py), so none is sent.
"""

from __future__ import annotations

import contextvars
import os
import tempfile
from pathlib import Path

import msgspec
import ray
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica
from vllm.lora.request import LoRARequest

from verl_masopd.serving.vllm_cpu import remove_dir
from verl_masopd.serving.vllm_cpu_servers import CpuVllmHttpServer, CpuVllmReplica

_ADAPTER = contextvars.ContextVar("adapter_request")  # (LoRARequest, cache salt) of the request served


class RoutedEngine:
    """vLLM's engine client whose `generate` takes the adapter request and cache salt of the
    request being served."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate(self, prompt, *args, lora_request=None, **kwargs):
        adapter, salt = _ADAPTER.get()
        return self._engine.generate(
            {**prompt, "cache_salt": salt}, *args, lora_request=lora_request or adapter, **kwargs
        )


class AdapterRouting:
    """Mixed into a verl vLLM server class: one LoRA adapter per name (module docstring)."""

    async def run_server(self, args):
        await super().run_server(args)
        self.engine = RoutedEngine(self.engine)
        self.adapters: dict[str, LoRARequest] = {}
        self.adapter_versions: dict[str, int] = {}
        self.adapter_root = Path(tempfile.mkdtemp(prefix="adapters-"))

    async def load_adapter(self, name: str, files: dict[str, bytes], version: int) -> None:
        """Serve `files` (an adapter in PEFT's format) as adapter `name`, weights of step `version`."""
        folder = self.adapter_root / f"{name}-{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for filename, content in files.items():
            (folder / filename).write_bytes(content)
        previous = self.adapters.get(name)
        number = previous.lora_int_id if previous is not None else len(self.adapters) + 1
        request = LoRARequest(lora_name=name, lora_int_id=number, lora_path=os.fspath(folder))
        loaded = await self.engine.add_lora(msgspec.structs.replace(request, load_inplace=True))
        if not loaded:
            raise RuntimeError(f"vLLM did not load adapter {name!r} (step {version}) from {folder}")
        self.adapters[name] = request
        self.adapter_versions[name] = version
        if previous is not None and previous.lora_path != request.lora_path:
            remove_dir(Path(previous.lora_path))

    async def generate(self, *args, adapter: str | None = None, **kwargs):
        if adapter not in self.adapters:
            raise ValueError(f"adapter {adapter!r} is not loaded; this server serves {sorted(self.adapters)}")
        version = self.adapter_versions[adapter]
        token = _ADAPTER.set((self.adapters[adapter], f"{adapter}@{version}"))
        try:
            output = await super().generate(*args, **kwargs)
        finally:
            _ADAPTER.reset(token)
        output.extra_fields["global_steps"] = version
        return output


class AdapterHttpServer(AdapterRouting, vLLMHttpServer):
    """verl's vLLM server with an adapter per policy."""


class CpuAdapterHttpServer(AdapterRouting, CpuVllmHttpServer):
    """The CPU build's vLLM server with an adapter per policy."""


class AdapterReplica(vLLMReplica):
    """verl's vLLM replica whose servers are `AdapterHttpServer`s."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(AdapterHttpServer)


class CpuAdapterReplica(CpuVllmReplica):
    """The CPU replica whose server is a `CpuAdapterHttpServer`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CpuAdapterHttpServer)


def adapter_replica_class(device: str, name: str) -> type:
    """The replica class for an adapter server on `device`: its standalone resource pool and
    workers carry the suffix `_{name}`, apart from the teacher's and other adapter servers'."""
    base = CpuAdapterReplica if device == "cpu" else AdapterReplica

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self.name_suffix = f"_{name}"

    return type(f"{base.__name__}_{name}", (base,), {"__init__": __init__})
