"""Where a benchmark's measurement goes: benchmarks/results/<name>.json, also printed."""

import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def save_result(name: str, report: dict, echo: bool = True) -> Path:
    """Write `report` to results/<name>.json (and print it when `echo`); returns the path.

    The machine's core count and load averages (1, 5, 15 min) when the run ended are added, so that a
    measurement taken while other jobs ran shows it, with the processor and the CPU kernels torch
    chose (its capability): results that depend on floating-point kernels, such as parameter digests,
    are comparable only between runs where these agree."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "load_average_1_5_15_min": os.getloadavg(), **_processor()}
    report = {**report, "machine_at_end": machine}
    path = RESULTS / f"{name}.json"
    text = json.dumps(report, indent=2)
    path.write_text(text + "\n")
    if echo:
        print(text)
    return path


def _processor() -> dict:
    """The CPU's model name (Linux) and torch's CPU capability, where they can be read."""
    found = {"machine": platform.machine()}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        if names:
            found["cpu_model"] = names[0]
    try:
        import torch

        found["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass
    return found
