"""LiveCodeBench code_generation_lite: the release's `test*.jsonl` files (or any jsonl/json/parquet).

`public_test_cases` is a JSON string (a decoded list is accepted too); `private_test_cases` is a
JSON string in old releases and base64 -> zlib -> pickled str -> JSON in newer ones. Each test is
`{"input", "output", "testtype": "stdin" | "functional"}`. Functional tests hold one JSON value
per line of `input` (the positional arguments) and the JSON return value as `output`; the
function is `metadata["func_name"]`. Public and private tests make the golden tests.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import code_row
from data_prep.source import Source, json_field, required_text, unique_tests, with_starter_code
from verl_masopd.workflows.problem import TestCase

STDIN, FUNCTIONAL = "stdin", "functional"


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, None))


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    uid = required_text(record, "question_id")
    content = required_text(record, "question_content")
    metadata = json_field(fields.get("metadata") or "{}", "metadata")
    if not isinstance(metadata, dict):
        raise Dropped("field 'metadata' is not a JSON object")
    public = json_field(fields.get("public_test_cases") or "[]", "public_test_cases")
    private = _private_tests(fields.get("private_test_cases") or "[]")
    if not isinstance(public, list) or not isinstance(private, list):
        raise Dropped("test cases are not a list")
    if not public + private:
        raise Dropped("no tests")
    kinds = {case.get("testtype") if isinstance(case, dict) else None for case in public + private}
    if kinds not in ({STDIN}, {FUNCTIONAL}):
        raise Dropped(f"test types {sorted(map(str, kinds))} instead of all stdin or all functional")
    fn_name = ""
    if kinds == {FUNCTIONAL}:
        fn_name = metadata.get("func_name") or ""
        if not fn_name:
            raise Dropped("functional tests without metadata.func_name")
    convert = _functional_test if fn_name else _stdin_test
    public_tests = unique_tests([convert(case) for case in public])
    starter = fields.get("starter_code") or ""
    return code_row(
        data_source="livecodebench",
        uid=uid,
        split=split,
        statement=with_starter_code(content, starter),
        tests=unique_tests(public_tests + [convert(case) for case in private]),
        public_tests=public_tests,
        fn_name=fn_name,
        metadata={
            "title": fields.get("question_title") or "",
            "platform": fields.get("platform") or "",
            "contest_id": fields.get("contest_id") or "",
            "contest_date": str(fields.get("contest_date") or ""),
            "difficulty": fields.get("difficulty") or "",
            "starter_code": starter,
        },
    )


def decode_private_tests(text: str) -> list:
    """Private tests as LiveCodeBench stores them: plain JSON, or base64(zlib(pickle(JSON str)))."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        packed = zlib.decompress(base64.b64decode(text.encode("utf-8"), validate=True))
        return json.loads(_StrOnlyUnpickler(io.BytesIO(packed)).load())
    except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, TypeError, ValueError):
        raise Dropped("field 'private_test_cases' cannot be decoded") from None


class _StrOnlyUnpickler(pickle.Unpickler):
    """The payload is a pickled str; refusing every global keeps a crafted file from running code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def _private_tests(value) -> list:
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise Dropped("field 'private_test_cases' is not a string")
    return decode_private_tests(value)


def _stdin_test(case: dict) -> TestCase:
    if not isinstance(case.get("input"), str) or not isinstance(case.get("output"), str):
        raise Dropped("stdin test without string input and output")
    return TestCase(case["input"], case["output"])


def _functional_test(case: dict) -> TestCase:
    try:
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        expected = json.loads(case["output"])
    except (KeyError, AttributeError, ValueError):
        raise Dropped("functional test whose arguments or output are not JSON lines") from None
    return TestCase(json.dumps(args), json.dumps(expected))


SOURCE = Source(name="livecodebench", default_split="test", records=records, to_row=to_row)
