"""The project's parquet row schema (verl_masopd/workflows/problem.py) and its validation on read.

Every source writes exactly `ROW_SCHEMA`; `extra_info` holds only strings and one int, nested
things JSON-encoded, so files from different sources concatenate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.errors import DataError
from verl_masopd.workflows.problem import CODE, DOMAINS, MATH, QA, Problem, TestCase, encode_answers, encode_tests

EXTRA_INFO_TYPE = pa.struct(
    [
        ("index", pa.int64()),
        ("id", pa.string()),
        ("split", pa.string()),
        ("problem", pa.string()),
        ("public_tests", pa.string()),
        ("reference_solution", pa.string()),
        ("fn_name", pa.string()),
        ("metadata", pa.string()),
    ]
)
ROW_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", EXTRA_INFO_TYPE),
    ]
)


def code_row(
    *,
    data_source: str,
    uid: str,
    split: str,
    statement: str,
    tests: list[TestCase],
    public_tests: list[TestCase] = (),
    reference_solution: str = "",
    fn_name: str = "",
    metadata: dict,
) -> dict:
    """A code row; `tests` are the golden tests, `public_tests` those shown in the statement."""
    return _row(
        data_source=data_source,
        ability=CODE,
        ground_truth=encode_tests(tests),
        uid=uid,
        split=split,
        statement=statement,
        public_tests=encode_tests(public_tests) if public_tests else "",
        reference_solution=reference_solution,
        fn_name=fn_name,
        metadata=metadata,
    )


def math_row(
    *, data_source: str, uid: str, split: str, statement: str, answer: str, reference_solution: str = "", metadata: dict
) -> dict:
    """A math row; `answer` is LaTeX without math delimiters (wrap it in $...$ for math_verify.parse)."""
    return _row(
        data_source=data_source,
        ability=MATH,
        ground_truth=answer,
        uid=uid,
        split=split,
        statement=statement,
        public_tests="",
        reference_solution=reference_solution,
        fn_name="",
        metadata=metadata,
    )


def qa_row(*, data_source: str, uid: str, split: str, question: str, answers: list[str], metadata: dict) -> dict:
    """A question-answering row; `answers` are the golden answers, any of which is correct."""
    return _row(
        data_source=data_source,
        ability=QA,
        ground_truth=encode_answers(answers),
        uid=uid,
        split=split,
        statement=question,
        public_tests="",
        reference_solution="",
        fn_name="",
        metadata=metadata,
    )


def _row(
    *, data_source, ability, ground_truth, uid, split, statement, public_tests, reference_solution, fn_name, metadata
):
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": statement}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": 0,
            "id": uid,
            "split": split,
            "problem": statement,
            "public_tests": public_tests,
            "reference_solution": reference_solution or "",
            "fn_name": fn_name or "",
            "metadata": json.dumps(metadata, sort_keys=True, ensure_ascii=False),
        },
    }


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a parquet file written in `ROW_SCHEMA`; raises DataError naming file, row and field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    for field in ROW_SCHEMA:
        if field.name not in table.schema.names:
            raise DataError(f"{path}: column {field.name!r} is missing")
        if not table.schema.field(field.name).type.equals(field.type):
            raise DataError(
                f"{path}: column {field.name!r} has type {table.schema.field(field.name).type}, expected {field.type}"
            )
    rows = table.select(ROW_SCHEMA.names).to_pylist()
    for number, row in enumerate(rows):
        _check_row(row, f"{path}: row {number}")
    return rows


def read_problems(path: str | Path) -> list[Problem]:
    """The problems of a parquet file written by data_prep, validated row by row."""
    problems = []
    for number, row in enumerate(read_rows(path)):
        try:
            problems.append(Problem.from_row(row))
        except ValueError as e:
            raise DataError(f"{path}: row {number}: {e}") from None
    return problems


def _check_row(row: dict, where: str) -> None:
    for name in ("data_source", "ability"):
        if not row[name]:
            raise DataError(f"{where}: field {name!r} is empty")
    if row["ability"] not in DOMAINS:
        raise DataError(f"{where}: field 'ability' must be 'code', 'math' or 'qa', got {row['ability']!r}")
    prompt = row["prompt"]
    if not prompt or not any(m["role"] == "user" and m["content"] for m in prompt):
        raise DataError(f"{where}: field 'prompt' has no user message with content")
    reward = row["reward_model"]
    if reward is None or not reward["ground_truth"]:
        raise DataError(f"{where}: field 'reward_model.ground_truth' is empty")
    extra = row["extra_info"]
    if extra is None:
        raise DataError(f"{where}: field 'extra_info' is null")
    for name in EXTRA_INFO_TYPE.names:
        if extra[name] is None:
            raise DataError(f"{where}: field 'extra_info.{name}' is null")
    if not extra["id"]:
        raise DataError(f"{where}: field 'extra_info.id' is empty")
    try:
        metadata = json.loads(extra["metadata"])
    except ValueError:
        raise DataError(f"{where}: field 'extra_info.metadata' is not JSON") from None
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: field 'extra_info.metadata' is not a JSON object")
