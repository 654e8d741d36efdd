"""The code keeps the project's style (ruff.toml): lint clean and formatted."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_lint_clean():
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_formatted():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
