"""The CPU platform that lets verl's engine run without an accelerator (VERL_PLATFORM=cpu).

Importing this package (verl does, through the `verl.plugins` entry point) registers
`PlatformCPU` under the name "cpu"; when VERL_PLATFORM=cpu it also patches verl's FSDP engine
for the CPU (see `engine_patches`). Unknown VERL_PLATFORM names are rejected by verl's own
`get_platform()` with a message naming them and the registered platforms. It also registers the
"sdpa_packed" attention the engine uses where flash-attention is absent (`packed_attention`).
verl's vLLM path on the CPU platform is readied by the plugin (verl_masopd/plugin.py) with
serving/vllm_cpu.py.
"""

import os

from verl_masopd.platform.cpu import PLATFORM_NAME, PlatformCPU
from verl_masopd.platform.engine_patches import apply_cpu_engine_patches
from verl_masopd.platform.packed_attention import PACKED_SDPA, packed_attention_implementation


def cpu_platform_selected() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


if cpu_platform_selected():
    apply_cpu_engine_patches()

__all__ = [
    "PACKED_SDPA",
    "PLATFORM_NAME",
    "PlatformCPU",
    "apply_cpu_engine_patches",
    "cpu_platform_selected",
    "packed_attention_implementation",
]
