"""The comparison script end to end in its smallest form (math, two methods run at once, one seed,
two steps, two held-out problems): the report's numbers are the evaluations' own, and a rerun resumes."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BENCH = "math-heldout"


def compare(tmp_path: Path) -> subprocess.CompletedProcess:
    # a local engine of this test process leaves torch.distributed's rendezvous variables behind
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}
    command = [
        sys.executable, str(ROOT / "benchmarks" / "tiny_world_compare.py"), "--runs", str(tmp_path / "runs"),
        "--cache", str(tmp_path / "world"), "--methods", "mas-prompt,mas-grpo", "--domains", "math",
        "--seeds", "0", "--steps", "2", "--test-freq", "1", "--curve-limit", "3", "--eval-k", "2", "--eval-limit", "2",
        "--jobs", "2", "--archive", str(tmp_path / "archive"),
    ]  # fmt: skip
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500)


def summary(folder: Path) -> dict:
    [row] = list(csv.DictReader(open(folder / "summary.csv")))
    return {k: float(v) for k, v in row.items()}


@pytest.mark.timeout(3000)  # about 3 CPU-minutes; a shared, loaded machine stretches the wall time
def test_compare_end_to_end_and_resume(tmp_path):
    done = compare(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = tmp_path / "runs"
    report = json.loads((runs / "report" / "report.json").read_text())
    main = report["main_table"]
    assert main["columns"] == [BENCH, "math avg"] and list(main["rows"]) == ["mas-prompt", "mas-grpo"]
    for method in ("mas-prompt", "mas-grpo"):
        folder = runs / method / "seed0" / "eval" / BENCH
        records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
        episodes = [e for r in records for e in r["episodes"]]
        assert len(records) == 2 and len(episodes) == 4
        accuracy = sum(e["correct"] for e in episodes) / len(episodes)
        cell = main["rows"][method][BENCH]
        assert cell == {"mean": accuracy, "std": None, "n": 1, "values": [accuracy], "seeds": [0]}
        assert main["rows"][method]["math avg"]["mean"] == accuracy
        roles = report["role_tables"]["math"]["rows"][method]
        s, swapped = summary(folder), summary(runs / method / "seed0" / "eval-swap" / BENCH)
        for role in ("reasoner", "tool_user"):
            assert roles[f"Δ {role}"]["mean"] == pytest.approx(s[f"role_advantage/{role}"])
            assert roles[f"format violations {role}"]["mean"] == pytest.approx(s[f"format_violations/{role}"])
        assert roles["swap drop"]["mean"] == pytest.approx(s["accuracy"] - swapped["accuracy"])
        assert json.loads((folder / "settings.json").read_text())["k"] == 2
    # validation on the first 3 held-out problems before training and after each of the 2 steps
    curve = report["curves"]["math"]["mas-grpo"]
    assert curve["steps"] == [0, 1, 2] and curve["seeds"] == [0]
    log = (runs / "mas-grpo" / "seed0" / "train" / "math" / "train.log").read_text()
    assert log.count("val/problems:3 ") == 3
    assert "mas-prompt" not in report["curves"]["math"]
    for name in ("main_table.png", "curves.png"):
        with Image.open(runs / "report" / name) as image:
            assert image.format == "PNG"
    outcomes = json.loads((runs / "compare.json").read_text())["runs"]
    assert set(outcomes) == {
        "mas-prompt/seed0/math/eval", "mas-prompt/seed0/math/eval-swap",
        "mas-grpo/seed0/math/train", "mas-grpo/seed0/math/eval", "mas-grpo/seed0/math/eval-swap",
    }  # fmt: skip

    # a finished run is skipped; a partly written evaluation (no done.json) is redone
    partial = runs / "mas-prompt" / "seed0" / "eval-swap" / BENCH
    (partial / "done.json").unlink()
    (partial / "leftover").write_text("x")
    again = compare(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    outcomes = json.loads((runs / "compare.json").read_text())["runs"]
    assert [k for k, v in outcomes.items() if not v["skipped"]] == ["mas-prompt/seed0/math/eval-swap"]
    assert (partial / "done.json").is_file() and not (partial / "leftover").exists()

    # a new session: no RUNS, the archived cells (no checkpoints) restored and skipped, the same report
    archived = sorted(p.relative_to(tmp_path / "archive").as_posix() for p in (tmp_path / "archive").rglob("*.tar.gz"))
    assert archived == ["mas-grpo/seed0/math.tar.gz", "mas-prompt/seed0/math.tar.gz"]
    shutil.rmtree(runs)
    restored = compare(tmp_path)
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert "2 archived cells restored" in restored.stdout
    outcomes = json.loads((runs / "compare.json").read_text())["runs"]
    assert all(v["skipped"] for v in outcomes.values())
    assert not list((runs / "mas-grpo" / "seed0" / "train" / "math" / "checkpoints").glob("global_step_*"))
    assert json.loads((runs / "report" / "report.json").read_text())["main_table"] == main
