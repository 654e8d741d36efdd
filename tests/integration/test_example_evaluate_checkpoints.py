"""examples/evaluate_checkpoints.py runs on two saved checkpoints of a tiny run and reports each
in the system its run trained (horizon 1 here: every episode lasts one turn)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evaluate_checkpoints.py"


def test_evaluate_checkpoints_example(tmp_path, save_tiny_checkpoint):
    root = tmp_path / "checkpoints"
    overrides = ("workflow.horizon=1", "data.max_response_length=6")
    first = save_tiny_checkpoint(root, 1, ["reasoner", "tool_user"], *overrides)
    newest = save_tiny_checkpoint(root, 2, ["reasoner", "tool_user"], *overrides)
    data = tmp_path / "math.parquet"
    subprocess.run(
        [sys.executable, "-m", "data_prep", "builtin", "--domain", "math", "--output", str(data), "--n", "2"],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--data", str(data), "--checkpoint", str(first), "--checkpoint", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["checkpoint"] for row in rows] == [str(first), str(newest)]
    for row in rows:
        assert row["avg_turns"] == 1.0 and 0.0 <= row["accuracy"] <= 1.0
