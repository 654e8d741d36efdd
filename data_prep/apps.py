"""APPS (hendrycks/apps): the original per-problem folders or the HF (codeparrot/apps) jsonl/parquet.

Folder layout: `<split>/<problem id>/question.txt, input_output.json, solutions.json,
metadata.json, starter_code.py`. HF layout: one record per problem with `problem_id, question,
solutions, input_output, difficulty, url, starter_code`, `solutions` and `input_output` holding
the files' JSON text. Both give the same row.

`input_output` is `{"inputs": [...], "outputs": [...]}`, plus `"fn_name"` for call-based problems.
Stdin tests whose input or output is a list of lines are joined with newlines. Call-based tests
become input = JSON list of positional arguments, output = JSON of the return value; Codewars
outputs come wrapped in a one-element list (APPS's testing_util accepts `out == expected[0]`) and
are unwrapped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import DataError, Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import code_row
from data_prep.source import Source, json_field, required_text, unique_tests, with_starter_code
from verl_masopd.workflows.problem import TestCase

PROBLEM_FILES = ("question.txt", "input_output.json", "solutions.json", "metadata.json", "starter_code.py")


def records(path: Path, split: str) -> Iterator[Record]:
    folders = _problem_folders(path, split)
    if folders is None:
        return read_records(data_files(path, split))
    return (_folder_record(folder, position) for position, folder in enumerate(folders))


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    question = required_text(record, "question")
    if fields.get("problem_id") is None:
        raise Dropped("field 'problem_id' is missing")
    starter = fields.get("starter_code") or ""
    spec = _json_field(fields.get("input_output"), "input_output")
    if not isinstance(spec, dict) or not spec.get("inputs"):
        raise Dropped("no tests")
    fn_name = spec.get("fn_name") or ""
    difficulty, url = _difficulty_and_url(fields)
    tests = _call_tests(spec, url) if fn_name else _stdin_tests(spec)
    solutions = _json_field(fields.get("solutions"), "solutions") or []
    if not isinstance(solutions, list):
        raise Dropped("field 'solutions' is not a JSON list")
    return code_row(
        data_source="apps",
        uid=str(fields["problem_id"]),
        split=split,
        statement=with_starter_code(question, starter),
        tests=unique_tests(tests),
        reference_solution=next((s for s in solutions if isinstance(s, str) and s.strip()), ""),
        fn_name=fn_name,
        metadata={"difficulty": difficulty, "url": url, "starter_code": starter},
    )


def _difficulty_and_url(fields: dict) -> tuple[str, str]:
    """From the HF fields, or from the folder layout's metadata.json text."""
    if "metadata" in fields:
        metadata = _json_field(fields["metadata"], "metadata.json") or {}
        if not isinstance(metadata, dict):
            raise Dropped("field 'metadata.json' is not a JSON object")
    else:
        metadata = fields
    return str(metadata.get("difficulty") or ""), str(metadata.get("url") or "")


def _json_field(value, name: str):
    """An optional JSON field: absent or empty is None."""
    return None if value is None or value == "" else json_field(value, name)


def _pairs(spec: dict) -> list[tuple]:
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise Dropped("input_output has different numbers of inputs and outputs")
    return list(zip(inputs, outputs, strict=True))


def _stdin_tests(spec: dict) -> list[TestCase]:
    return [TestCase(_text(i), _text(o)) for i, o in _pairs(spec)]


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    raise Dropped("stdin test that is neither a string nor a list of lines")


def _call_tests(spec: dict, url: str) -> list[TestCase]:
    pairs = _pairs(spec)
    if not all(isinstance(args, list) for args, _ in pairs):
        raise Dropped("call-based test input that is not a list of arguments")
    wrapped = "codewars.com" in url and all(isinstance(o, list) and len(o) == 1 for _, o in pairs)
    return [TestCase(json.dumps(args), json.dumps(out[0] if wrapped else out)) for args, out in pairs]


def _problem_folders(path: Path, split: str) -> list[Path] | None:
    """Problem folders under `path` (the release root, a split folder or one problem), else None."""
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if not path.is_dir():
        return None
    if (path / "question.txt").is_file():
        return [path]
    root = path / split if (path / split).is_dir() else path
    folders = sorted((d for d in root.iterdir() if (d / "question.txt").is_file()), key=lambda d: d.name)
    return folders or None


def _folder_record(folder: Path, position: int) -> Record:
    fields = {}
    for name in PROBLEM_FILES:
        file = folder / name
        if file.is_file():
            try:
                fields[name] = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise DataError(f"{file}: cannot read ({e})") from None
    problem_id = int(folder.name) if folder.name.isdigit() else folder.name
    record = {
        "problem_id": problem_id,
        "question": fields.get("question.txt"),
        "solutions": fields.get("solutions.json"),
        "input_output": fields.get("input_output.json"),
        "metadata": fields.get("metadata.json"),
        "starter_code": fields.get("starter_code.py", ""),
    }
    return Record(record, position, str(folder))


SOURCE = Source(name="apps", default_split="test", records=records, to_row=to_row)
