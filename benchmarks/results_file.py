"""Where a benchmark's measurement goes: benchmarks/results/<name>.json, also printed."""

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def save_result(name: str, report: dict, echo: bool = True) -> Path:
    """Write `report` to results/<name>.json (and print it when `echo`); returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    text = json.dumps(report, indent=2)
    path.write_text(text + "\n")
    if echo:
        print(text)
    return path
