"""End-to-end evaluation of the tiny model on the built-in datasets through the CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def write_builtin(path, domain: str, n: int) -> None:
    command = [sys.executable, "-m", "data_prep", "builtin", "--domain", domain, "--output", str(path), "--n", str(n)]
    subprocess.run(command, check=True, capture_output=True)


def run_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verl_masopd.eval", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "domain,workflow,roles",
    [
        ("code", "mas", {"coder_0", "tester_0"}),
        ("math", "mas", {"reasoner_0", "tool_user_0"}),
        ("math", "sa", {"reasoner_0"}),
    ],
)
def test_eval_cli_end_to_end(tmp_path, tiny_model_path, tiny_teacher_path, domain, workflow, roles):
    data = tmp_path / f"{domain}.parquet"
    write_builtin(data, domain, 3)
    out = tmp_path / "out"
    role = "tester" if domain == "code" else "tool_user"
    extra = ["--role-model", f"{role}={tiny_teacher_path}"] if workflow == "mas" else []
    done = run_eval(
        "--data", str(data), "--model", tiny_model_path, *extra, "--workflow", workflow, "--horizon", "2",
        "--k", "2", "--max-new-tokens", "12", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["uid"] for r in records] == [f"{domain}-{i}" for i in range(3)]
    for r in records:
        assert len(r["episodes"]) == 2
        for e in r["episodes"]:
            assert 1 <= e["num_turns"] <= 2 and len(e["turns"]) == e["num_turns"]
            assert set(e["turns"][0]["outputs"]) == roles
            assert isinstance(e["correct"], bool)
        assert r["accuracy"] == sum(e["correct"] for e in r["episodes"]) / 2
    [row] = list(csv.DictReader(open(out / "summary.csv")))
    episodes = [e for r in records for e in r["episodes"]]
    assert int(row["problems"]) == 3 and int(row["episodes"]) == 6
    assert float(row["avg_turns"]) == pytest.approx(sum(e["num_turns"] for e in episodes) / 6)
    if workflow == "mas":
        agreed0 = sum(e["turns"][0]["agreed"] for e in episodes) / 6
        assert float(row["agreement@0"]) == pytest.approx(agreed0)
    else:  # one agent: no agreement
        assert math.isnan(float(row["agreement@0"]))
    header = (out / "summary.md").read_text().splitlines()[0]
    assert "| accuracy |" in header and "| agreement@1 |" in header


def test_eval_cli_rejects_unknown_role(tmp_path, tiny_model_path):
    data = tmp_path / "math.parquet"
    write_builtin(data, "math", 1)
    done = run_eval(
        "--data", str(data), "--model", tiny_model_path, "--role-model", "coder=/x", "--out", str(tmp_path / "o")
    )
    assert done.returncode == 2 and "--role-model 'coder=/x'" in done.stderr


def test_eval_cli_plays_the_system_a_checkpoint_trained(tmp_path, save_tiny_checkpoint):
    """One shared policy over a two-agent system, horizon 3 and 6-token responses, all read from
    the run's saved configuration; the --horizon flag overrides the saved horizon."""
    overrides = ("workflow.policy_sharing=shared", "workflow.horizon=3", "data.max_response_length=6")
    step = save_tiny_checkpoint(tmp_path / "checkpoints", 1, ["shared"], *overrides)
    data = tmp_path / "math.parquet"
    write_builtin(data, "math", 2)
    out = tmp_path / "out"
    done = run_eval(
        "--data", str(data), "--checkpoint", str(tmp_path / "checkpoints"), "--horizon", "1", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["checkpoint"] == str(step.resolve()) and settings["policy_sharing"] == "shared"
    assert (settings["horizon"], settings["max_new_tokens"], settings["workflow"]) == (1, 6, "mas")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    episodes = [e for r in records for e in r["episodes"]]
    assert len(episodes) == 2 and all(e["num_turns"] == 1 for e in episodes)
    assert all(set(e["turns"][0]["outputs"]) == {"reasoner_0", "tool_user_0"} for e in episodes)


def test_eval_cli_plays_a_registered_workflow_the_checkpoint_imports(tmp_path, save_tiny_checkpoint, tiny_model_path):
    """A run of the Solver–Verifier example saved `imports`: its checkpoint's evaluation imports the
    example again and plays that workflow. Without the import the name is unknown, and said so."""
    example = Path(__file__).resolve().parents[2] / "examples" / "solver_verifier.py"
    run = (f"imports=[{example}]", "workflow.name=solver_verifier", "workflow.horizon=2", "data.max_response_length=6")
    save_tiny_checkpoint(tmp_path / "checkpoints", 1, ["solver", "verifier"], *run)
    data = tmp_path / "math.parquet"
    write_builtin(data, "math", 2)
    out = tmp_path / "out"
    done = run_eval("--data", str(data), "--checkpoint", str(tmp_path / "checkpoints"), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    settings = json.loads((out / "settings.json").read_text())
    assert (settings["workflow"], settings["imports"]) == ("solver_verifier", [str(example)])
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert all(set(e["turns"][0]["outputs"]) == {"solver_0", "verifier_0"} for r in records for e in r["episodes"])

    unknown = run_eval(
        "--data", str(data), "--model", tiny_model_path, "--workflow", "solver_verifier", "--out", str(tmp_path / "o")
    )
    assert unknown.returncode == 2 and "unknown workflow 'solver_verifier'" in unknown.stderr
