"""The GSM8K converter on the release's training file in ../shared/data and on built rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from math_verify import parse, verify

from data_prep.convert import convert
from data_prep.errors import Dropped
from data_prep.records import Record
from data_prep.schema import read_problems, read_rows
from data_prep.sources import SOURCES

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_samples = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA} (shared/ beside the checkout)"
)


def _to_row(fields: dict) -> dict:
    return SOURCES["gsm8k"].to_row(Record(fields, 7, "built row"), "train")


@needs_samples
def test_gsm8k_release_file(tmp_path):
    out = tmp_path / "gsm8k.parquet"
    summary = convert(SOURCES["gsm8k"], SHARED_DATA / "gsm8k" / "train.jsonl", out, None)
    assert (summary.read, summary.kept) == (7473, 7473)
    problems, rows = read_problems(out), read_rows(out)
    first = problems[0]
    assert first.statement.startswith("Natalia sold clips to 48 of her friends in April")
    assert (first.uid, first.answer) == ("0", "72")
    assert rows[0]["extra_info"]["reference_solution"] == (
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May."
    )
    assert json.loads(rows[0]["extra_info"]["metadata"]) == {"steps": 2}
    steps = [json.loads(row["extra_info"]["metadata"])["steps"] for row in rows]
    assert min(steps) == 2 and max(steps) == 9
    assert all("<<" not in row["extra_info"]["reference_solution"] for row in rows)
    assert all(verify(parse(f"${p.answer}$"), parse(f"${p.answer}$")) for p in problems[:50])


def test_gsm8k_answers_lose_commas_and_annotations():
    row = _to_row(
        {"question": "How much?", "answer": "He pays 1000*2=<<1000*2=2000>>2000.\nThen 2,000-5=1,995\n#### 1,995"}
    )
    assert row["reward_model"]["ground_truth"] == "1995"
    assert row["extra_info"]["reference_solution"] == "He pays 1000*2=2000.\nThen 2,000-5=1,995"
    assert row["extra_info"]["id"] == "7" and json.loads(row["extra_info"]["metadata"]) == {"steps": 2}
    assert _to_row({"question": "Q", "answer": "x\n#### -3"})["reward_model"]["ground_truth"] == "-3"
    with pytest.raises(Dropped, match="no '#### <final answer>' line"):
        _to_row({"question": "Q", "answer": "It is 5."})
    with pytest.raises(Dropped, match="not an integer"):
        _to_row({"question": "Q", "answer": "x\n#### 2.5"})
