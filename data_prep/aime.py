"""AIME 2024 and AIME 2025 (HF aime_2024 / aime25 layouts): jsonl/json/parquet rows.

Fields `problem`, `answer` (an integer 0-999 as a string, zero-padded in some AIME 2024 rows),
and optionally `id`, `solution`, `url`. The answer is written without padding ("025" -> "25").
Without an `id` the record's 0-based position is the id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import math_row
from data_prep.source import Source, required_text


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, None))


def integer_answer(answer) -> str:
    """The AIME answer as an unpadded integer string; Dropped unless it is an integer 0-999."""
    text = str(answer).strip() if answer is not None else ""
    if not text.isdigit() or int(text) > 999:
        raise Dropped("answer is not an integer 0-999")
    return str(int(text))


def _converter(data_source: str):
    def to_row(record: Record, split: str) -> dict:
        fields = record.fields
        uid = fields.get("id")
        return math_row(
            data_source=data_source,
            uid=str(record.position if uid is None else uid),
            split=split,
            statement=required_text(record, "problem"),
            answer=integer_answer(fields.get("answer")),
            reference_solution=fields.get("solution") or "",
            metadata={"url": fields.get("url") or ""},
        )

    return to_row


AIME24 = Source(name="aime24", default_split="test", records=records, to_row=_converter("aime24"))
AIME25 = Source(name="aime25", default_split="test", records=records, to_row=_converter("aime25"))
