"""GSM8K (openai/grade-school-math `train.jsonl` / `test.jsonl`): rows `question, answer`.

The release's `answer` is a worked solution with calculator annotations (`<<48/2=24>>`) whose
last line is `#### <final answer>`, an integer sometimes written with thousands commas. The
final answer, commas removed, is the row's answer; the solution above it, annotations removed,
is `extra_info.reference_solution`; its number of lines is metadata `steps`, a difficulty
measure (the release's own: problems take 2 to 8 steps). The record's position is the id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import math_row
from data_prep.source import Source, required_text

_FINAL = re.compile(r"^(?P<solution>.*?)\n?####\s*(?P<answer>[^\n]*)\s*$", re.DOTALL)
_ANNOTATION = re.compile(r"<<[^<>]*>>")
_INTEGER = re.compile(r"-?\d+")


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, None))


def split_answer(text: str) -> tuple[str, str]:
    """(solution without calculator annotations, final integer answer without commas)."""
    match = _FINAL.match(text.strip())
    if match is None:
        raise Dropped("answer has no '#### <final answer>' line")
    answer = match["answer"].replace(",", "").strip()
    if not _INTEGER.fullmatch(answer):
        raise Dropped("final answer is not an integer")
    return _ANNOTATION.sub("", match["solution"]).strip(), str(int(answer))


def to_row(record: Record, split: str) -> dict:
    solution, answer = split_answer(required_text(record, "answer"))
    return math_row(
        data_source="gsm8k",
        uid=str(record.position),
        split=split,
        statement=required_text(record, "question"),
        answer=answer,
        reference_solution=solution,
        metadata={"steps": len([line for line in solution.splitlines() if line.strip()])},
    )


SOURCE = Source(name="gsm8k", default_split="train", records=records, to_row=to_row)
