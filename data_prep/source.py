"""What every dataset converter provides."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record
from verl_masopd.workflows.problem import TestCase


def problem_text(row: dict) -> str:
    """The row's problem text: two rows with the same (normalised) text are duplicates."""
    return row["extra_info"]["problem"]


@dataclass(frozen=True)
class Source:
    """A dataset: how to read its release files and turn one record into a row.

    `records(path, split)` raises DataError for unusable input; `to_row(record, split)` returns a
    row of data_prep.schema or raises Dropped with the reason. Rows whose `duplicate_key` is the
    same text as an earlier row's (data_prep.dedup.normalised_text) are dropped as
    `duplicate_reason`.
    """

    name: str
    default_split: str
    records: Callable[[Path, str], Iterator[Record]]
    to_row: Callable[[Record, str], dict]
    duplicate_key: Callable[[dict], str] = problem_text
    duplicate_reason: str = "duplicate problem text"


def required_text(record: Record, name: str) -> str:
    """The non-blank string field `name`, or Dropped naming it."""
    value = record.fields.get(name)
    if value is None:
        raise Dropped(f"field {name!r} is missing")
    if not isinstance(value, str):
        raise Dropped(f"field {name!r} is not a string")
    if not value.strip():
        raise Dropped(f"field {name!r} is empty")
    return value


def json_field(value, name: str):
    """A JSON-encoded field decoded (values that are not strings pass through), or Dropped naming it."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise Dropped(f"field {name!r} is not valid JSON") from None


def unique_tests(tests: list[TestCase]) -> list[TestCase]:
    """The tests without repeats, first occurrence kept."""
    return list(dict.fromkeys(tests))


def with_starter_code(statement: str, starter: str) -> str:
    """The statement followed by the starter code the solution must complete, if there is one."""
    if not starter.strip():
        return statement
    return f"{statement.rstrip()}\n\nStarter code:\n```python\n{starter.rstrip()}\n```"
