"""The CPU platform's device module and settings, as verl's engine calls them."""

import torch

from verl_masopd.platform.cpu import PlatformCPU, torch_cpu_shim


def test_platform_answers_for_a_cpu():
    platform = PlatformCPU()
    assert (platform.device_name, platform.communication_backend_name(), platform.current_device()) == (
        "cpu",
        "gloo",
        "cpu",
    )
    assert platform.is_available() and not platform.is_platform_available(use_smi_check=True)
    assert torch.zeros(2).to(platform.current_device()).device.type == "cpu"
    assert platform.get_device_capability() == (None, None)
    with platform.nvtx_range("step"):
        pass


def test_device_module_memory_calls_report_host_memory():
    assert torch_cpu_shim.memory_allocated() == 0 and torch_cpu_shim.max_memory_reserved() == 0
    free, total = torch_cpu_shim.mem_get_info()
    assert 0 < free <= total
    assert torch_cpu_shim.empty_cache() is None
    assert torch_cpu_shim.synchronize is torch.cpu.synchronize


def test_device_module_rng_state_round_trip():
    torch_cpu_shim.manual_seed(7)
    state = torch_cpu_shim.get_rng_state()
    first = torch.rand(3)
    torch_cpu_shim.set_rng_state(state)
    assert torch.equal(torch.rand(3), first)
