"""Polaris-Dataset-53K: HF rows `problem, answer, difficulty` (optionally `id`).

Also accepted: the renamed fields `prompt, expected_answer, index` of some redistributions, and the
official verl parquet (`prompt` as chat messages, `reward_model.ground_truth`). Answers are
free-form LaTeX strings, written stripped of surrounding whitespace and `$` delimiters; the
difficulty ("k/8", the reference model's pass-rate bucket) goes to metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import math_row
from data_prep.source import Source


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, None))


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    statement = _first_text(fields, "problem", "prompt")
    answer = _first_text(fields, "answer", "expected_answer")
    if answer is None and isinstance(fields.get("reward_model"), dict):
        answer = fields["reward_model"].get("ground_truth")
    if not statement:
        raise Dropped("no problem text")
    answer = str(answer or "").strip().strip("$").strip()
    if not answer:
        raise Dropped("no answer")
    uid = next((fields[k] for k in ("id", "index") if fields.get(k) is not None), record.position)
    return math_row(
        data_source="polaris",
        uid=str(uid),
        split=split,
        statement=statement,
        answer=answer,
        metadata={"difficulty": str(fields.get("difficulty") or "")},
    )


def _first_text(fields: dict, *names: str) -> str | None:
    """The first of `names` present; a chat-message list gives its user message's content."""
    for name in names:
        value = fields.get(name)
        if isinstance(value, list):
            value = "\n".join(m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user")
        if isinstance(value, str):
            return value
    return None


SOURCE = Source(name="polaris", default_split="train", records=records, to_row=to_row)
