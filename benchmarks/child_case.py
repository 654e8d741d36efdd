"""One case of a benchmark in a process of its own: `script --child CASE ... --result FILE`.

A case that dies (out of memory, a crash) is recorded as failed with the last lines of its error
output instead of ending the benchmark; the load averages before and after show what ran beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path


def run_case(command: list[str], case: str) -> dict:
    """The JSON the child wrote to --result, or {"case", "failed"}; with the load averages around it."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix=f"{case}-result-") as folder:
        written = Path(folder) / "case.json"
        done = subprocess.run([*command, "--result", str(written)], capture_output=True, text=True)
        if done.returncode or not written.exists():
            result = {"case": case, "failed": done.stderr.strip().splitlines()[-3:]}
        else:
            result = json.loads(written.read_text())
    result = {**result, "load_average_before": load_before, "load_average_after": os.getloadavg()}
    print(json.dumps(result), flush=True)
    return result
