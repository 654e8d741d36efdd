"""Where a benchmark's measurement goes: benchmarks/results/<name>.json, also printed."""

import json
import os
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def save_result(name: str, report: dict, echo: bool = True) -> Path:
    """Write `report` to results/<name>.json (and print it when `echo`); returns the path.

    The machine's core count and load averages (1, 5, 15 min) when the run ended are added, so that a
    measurement taken while other jobs ran shows it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {**report, "machine_at_end": {"cpus": os.cpu_count(), "load_average_1_5_15_min": os.getloadavg()}}
    path = RESULTS / f"{name}.json"
    text = json.dumps(report, indent=2)
    path.write_text(text + "\n")
    if echo:
        print(text)
    return path
