"""`PlatformCPU`: verl's platform interface for a machine without an accelerator.

Collectives go over gloo; the device module is `torch.cpu` extended with the memory, RNG and
IPC calls verl makes on an accelerator module, which are no-ops or host queries on a CPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _no_op(*args, **kwargs) -> None:
    return None


def _zero_bytes(*args, **kwargs) -> int:
    return 0


def _host_memory_info(*args, **kwargs) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


torch_cpu_shim = SimpleNamespace(
    **{name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("_")},
    empty_cache=_no_op,
    ipc_collect=_no_op,
    set_per_process_memory_fraction=_no_op,
    reset_peak_memory_stats=_no_op,
    memory_allocated=_zero_bytes,
    memory_reserved=_zero_bytes,
    max_memory_allocated=_zero_bytes,
    max_memory_reserved=_zero_bytes,
    mem_get_info=_host_memory_info,
    get_device_name=lambda *args, **kwargs: "cpu",
    get_rng_state=lambda *args, **kwargs: torch.get_rng_state(),
    set_rng_state=lambda state, *args, **kwargs: torch.set_rng_state(state),
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
)


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """Selected only explicitly (VERL_PLATFORM=cpu): auto-detection keeps verl's accelerator order."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return torch_cpu_shim

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return False

    def current_device(self) -> str:
        # verl passes this to `.to(...)` and `torch.device(...)`; an int would mean an accelerator.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None
