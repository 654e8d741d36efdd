"""The examples run as users run them (a fresh process from the repository root)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_custom_estimator_is_selected_by_name_and_estimates_the_toy_batch():
    result = subprocess.run(
        [sys.executable, "examples/custom_estimator.py"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # problem p: r = 1.5, 0.5, 0 → 0.5 · (r_i − mean of the other two) = 0.625, −0.125, −0.5; q alone → 0
    assert "role_loo (scale 0.5): advantages [0.625, -0.125, -0.5, 0.0]" in result.stdout
