"""The search workflow evaluated through the CLI with the tiny model and a real BM25 index: one QA
attempt per episode next to the episode records, then the report's QA tables of two such
evaluations (the hierarchical and the cascaded system) with their paired bootstrap differences.

The untrained model writes no tag: the hierarchical Leader's first output ends the episode
without a candidate; in the cascaded system the Answerers always act, on a Searcher's missing
report, and their candidates come back untagged."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest

from data_prep.schema import qa_row
from data_prep.writer import write_rows
from verl_masopd.eval.qa_attempts import FIELDS, QA_ATTEMPTS_FILE, read_attempts

pytestmark = pytest.mark.integration

# (dataset, uid, question, answer)
QUESTIONS = [
    ("toy", "q0", "What is the capital of Arland?", "Bex"),
    ("toy", "q1", "What is the capital of Corvin?", "Dun"),
    ("hop", "q2", "Which river is the capital of Arland on?", "Tol"),
]
MAX_NEW_TOKENS, K = 8, 2
# method: (horizon, workflow options besides the retriever)
SYSTEMS = {
    "hierarchical": (4, ["max_waves=1", "max_searchers_per_wave=2", "answer_candidates=2"]),
    "cascaded": (2, ["system=cascaded", "answer_candidates=2"]),
}


@pytest.fixture(scope="module")
def qa_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qa-eval")
    rows = [
        qa_row(data_source=d, uid=uid, split="test", question=q, answers=[a], metadata={}) for d, uid, q, a in QUESTIONS
    ]
    write_rows(rows, folder / "qa.parquet")
    return folder


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=600)


def check_attempts(out, method: str) -> list[dict]:
    """Every line of qa_attempts.jsonl against the episode it came from in records.jsonl."""
    records = {r["uid"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    lines = [json.loads(line) for line in (out / QA_ATTEMPTS_FILE).read_text().splitlines()]
    assert len(read_attempts(out / QA_ATTEMPTS_FILE)) == len(lines) == len(QUESTIONS) * K
    assert all(list(line) == list(FIELDS) for line in lines)
    assert [(a["dataset"], a["question"], a["attempt"]) for a in lines] == [
        (d, uid, j) for d, uid, _, _ in QUESTIONS for j in range(K)
    ]
    for a in lines:
        episode = records[a["question"]]["episodes"][a["attempt"]]
        candidate = episode["turns"][-1]["verifier"]["agents"].get("answerer_0")
        if candidate is None:
            assert a["failure"] == "no_candidate"
            assert not (a["em"] or a["sub_em"] or a["relaxed_em"])
        else:
            assert (a["em"], a["sub_em"], a["relaxed_em"], a["failure"]) == (
                candidate["em"], candidate["sub_em"], candidate["relaxed_em"], candidate["failure"]
            )  # fmt: skip
        assert a["em"] == episode["correct"]
        calls = sum(len(turn["outputs"]) for turn in episode["turns"])
        assert 0 < a["tokens_generated"] <= MAX_NEW_TOKENS * calls < a["tokens_read"]
    failures = {a["failure"] for a in lines}
    if method == "hierarchical":  # the Leader wrote neither a wave nor a hand-over
        assert failures == {"no_candidate"}
    else:  # the Answerers always act in the cascaded system
        assert "no_candidate" not in failures and failures <= {"untagged", "empty_candidate", None}
    return lines


def test_search_evaluations_and_their_qa_report(qa_data, toy_search_index, tiny_model_path, tmp_path):
    runs = tmp_path / "runs"
    attempts = {}
    for method, (horizon, options) in SYSTEMS.items():
        out = runs / method / "seed0" / "eval" / "qa"
        flags = [x for o in [f"retriever={toy_search_index}", *options] for x in ("--workflow-option", o)]
        done = run(
            "verl_masopd.eval", "--data", str(qa_data / "qa.parquet"), "--model", tiny_model_path,
            "--workflow", "search", "--horizon", str(horizon), "--k", str(K),
            "--max-new-tokens", str(MAX_NEW_TOKENS), *flags, "--out", str(out),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        attempts[method] = check_attempts(out, method)
        settings = json.loads((out / "settings.json").read_text())
        assert settings["workflow_options"]["retriever"] == toy_search_index
        [row] = list(csv.DictReader(open(out / "summary.csv")))
        assert float(row["accuracy"]) == sum(a["em"] for a in attempts[method]) / len(attempts[method])
        assert math.isnan(float(row["agreement@0"]))  # the search team does not agree: no agreement metric
        roles = {"hierarchical": {"leader"}, "cascaded": {"searcher", "answerer"}}[method]
        assert {key.split("/")[1] for key in row if key.startswith("format_violations/")} == roles

    report_dir = tmp_path / "report"
    done = run("verl_masopd.report", "--runs", str(runs), "--out", str(report_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["qa_systems"] == ["cascaded", "hierarchical"]  # the report's method order
    tables = {t["title"].split(":")[0]: t for t in report["qa_tables"]}
    assert tables["avg@2"]["columns"] == ["toy", "hop", "Macro"]
    for method, lines in attempts.items():
        for dataset in ("toy", "hop"):
            mine = [a for a in lines if a["dataset"] == dataset]
            assert tables["avg@2"]["rows"][method][dataset] == sum(a["em"] for a in mine) / len(mine)
            assert tables["no candidate"]["rows"][method][dataset] == sum(a["failure"] == "no_candidate" for a in mine)
            assert tables["tokens generated"]["rows"][method][dataset] == pytest.approx(
                sum(a["tokens_generated"] for a in mine) / len(mine)
            )
    difference = tables["cascaded − hierarchical"]
    assert list(difference["rows"]) == ["avg@2", "pass@2", "2/2"]
    macro = difference["rows"]["avg@2"]["Macro"]
    assert macro["low"] <= macro["difference"] <= macro["high"]
    markdown = (report_dir / "report.md").read_text()
    assert "QA of the search systems cascaded, hierarchical" in markdown
    assert "### avg@2: mean EM over attempts (%)" in markdown
    assert "### cascaded − hierarchical: difference with its 95% paired bootstrap interval" in markdown
    assert "| method | seeds | qa | qa avg |" in markdown  # the main table's qa column
