"""What verl's FSDP engine needs to run on the CPU platform, applied once when it is selected.

- `FSDPEngineWithLMHead` registered for device "cpu" in `EngineRegistry` (verl registers it for
  cuda and npu only).
- The process-group initialisers use plain "gloo": verl builds "cpu:gloo,<device>:<backend>",
  which for device "cpu" names the cpu backend twice and torch rejects it.
- Forward-only engines (a teacher, a reference) get an un-pinned FSDP2 `CPUOffloadPolicy`:
  verl forces `pin_memory=True`, and pinning needs an accelerator.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed

_applied = False


def _initialize_global_process_group(timeout_second=36000):
    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _initialize_global_process_group_ray(timeout_second=None, backend=None):
    if torch.distributed.is_initialized():
        return
    torch.distributed.init_process_group(
        backend=backend or "gloo",
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        timeout=timedelta(seconds=timeout_second) if timeout_second is not None else None,
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )


def _rebind(module_prefix: str, name: str, original, replacement) -> None:
    """Replace `original` wherever an already-imported verl module bound it by name."""
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith(module_prefix) and getattr(module, name, None) is original:
            setattr(module, name, replacement)


def apply_cpu_engine_patches() -> None:
    """Make verl's FSDP engine usable on the CPU platform. Idempotent."""
    global _applied
    if _applied:
        return
    import verl.utils.distributed as distributed

    _rebind(
        "verl",
        "initialize_global_process_group",
        distributed.initialize_global_process_group,
        _initialize_global_process_group,
    )
    _rebind(
        "verl",
        "initialize_global_process_group_ray",
        distributed.initialize_global_process_group_ray,
        _initialize_global_process_group_ray,
    )

    import verl.workers.engine_workers  # noqa: F401  (binds the patched initialiser by name)
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    class UnpinnedCPUOffloadPolicy(transformer_impl.CPUOffloadPolicy):
        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for model_type, engine_cls in (
        ("language_model", transformer_impl.FSDPEngineWithLMHead),
        ("value_model", transformer_impl.FSDPEngineWithValueHead),
    ):
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in EngineRegistry._engines[model_type][backend]:
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(engine_cls)
    _applied = True
