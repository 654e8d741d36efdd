"""CodeContests (deepmind/code_contests): HF parquet shards or jsonl/json rows.

Tests are `{"input": [str], "output": [str]}` pools: public, private and generated; all three
make the golden tests, the public ones are also kept as `public_tests`. The reference is the
first PYTHON3 (language id 3) entry of `solutions = {"language": [int], "solution": [str]}`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import code_row
from data_prep.source import Source, required_text, unique_tests
from verl_masopd.workflows.problem import TestCase

PYTHON3 = 3
SOURCES = ("unknown", "codechef", "codeforces", "hackerearth", "codejam", "atcoder", "aizu")
TEST_POOLS = ("public_tests", "private_tests", "generated_tests")


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, split))


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    name = required_text(record, "name")
    statement = required_text(record, "description")
    if fields.get("input_file") or fields.get("output_file"):
        raise Dropped("reads or writes a named file instead of stdin/stdout")
    pools = {pool: _tests(fields.get(pool), pool) for pool in TEST_POOLS}
    golden = unique_tests([test for pool in TEST_POOLS for test in pools[pool]])
    if not golden:
        raise Dropped("no tests")
    metadata = {
        "name": name,
        "source": _source_name(fields.get("source")),
        "difficulty": fields.get("difficulty"),
        "cf_contest_id": fields.get("cf_contest_id"),
        "cf_index": fields.get("cf_index"),
        "cf_rating": fields.get("cf_rating"),
        "cf_tags": list(fields.get("cf_tags") or []),
        "time_limit_s": _seconds(fields.get("time_limit")),
        "memory_limit_bytes": fields.get("memory_limit_bytes"),
        "test_counts": {pool: len(pools[pool]) for pool in TEST_POOLS},
    }
    return code_row(
        data_source="codecontests",
        uid=name,
        split=split,
        statement=statement,
        tests=golden,
        public_tests=unique_tests(pools["public_tests"]),
        reference_solution=_python3_solution(fields.get("solutions")),
        metadata=metadata,
    )


def _tests(pool, name: str) -> list[TestCase]:
    if pool is None:
        return []
    if not isinstance(pool, dict):
        raise Dropped(f"field {name!r} is not an {{input, output}} object")
    inputs, outputs = pool.get("input") or [], pool.get("output") or []
    if len(inputs) != len(outputs):
        raise Dropped(f"field {name!r} has different numbers of inputs and outputs")
    if not all(isinstance(text, str) for text in [*inputs, *outputs]):
        raise Dropped(f"field {name!r} holds a test that is not a string")
    return [TestCase(i, o) for i, o in zip(inputs, outputs, strict=True)]


def _python3_solution(solutions) -> str:
    if not isinstance(solutions, dict):
        return ""
    for language, code in zip(solutions.get("language") or [], solutions.get("solution") or [], strict=False):
        if language in (PYTHON3, "PYTHON3") and isinstance(code, str) and code.strip():
            return code
    return ""


def _source_name(source) -> str | None:
    if isinstance(source, int) and 0 <= source < len(SOURCES):
        return SOURCES[source]
    return source


def _seconds(time_limit) -> float | None:
    if not isinstance(time_limit, dict):
        return None
    return (time_limit.get("seconds") or 0) + (time_limit.get("nanos") or 0) / 1e9


SOURCE = Source(name="codecontests", default_split="train", records=records, to_row=to_row)
