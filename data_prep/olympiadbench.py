"""OlympiadBench OE_TO_maths_en_COMP (OpenBMB release JSON, or the HF copy's rows).

`final_answer` is a list of strings, each usually wrapped in `$...$`; several answers of one
problem are packed into one string ("$69$,$84$", "1,3,5"). The ground truth drops every `$` and a
trailing period and joins the list with ", ", giving LaTeX such as "69,84" that math-verify reads
as the set {69, 84} once wrapped as "$69,84$". The `unit` is not part of the ground truth (it is
kept in metadata with `answer_type`, `is_multiple_answer` and the `error` tolerance). The HF copy's
rows with images or a modality other than text are dropped.

Grading as the benchmark's judge does: `metadata.answer_rule` (verl_masopd/verify/answer_rule.py)
holds the `error` tolerance and compares items in order, or, for a problem with several answers
(`is_multiple_answer`), paired in any order; counts always matter ("-2" is not "-2, -2"). A
ground truth math-verify cannot read (only its text comes back, e.g. the stray letter of
"t(0,4]" or "m_{\\max }=n^{2}-n-1") could never be matched and is dropped with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from math_verify import parse

from data_prep.errors import Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import math_row
from data_prep.source import Source, required_text

IMAGE_FIELDS = tuple(f"image_{i}" for i in range(1, 6))


def records(path: Path, split: str) -> Iterator[Record]:
    return read_records(data_files(path, None))


def ground_truth(final_answer) -> str:
    """One LaTeX string (no math delimiters) for the list-valued `final_answer`."""
    if isinstance(final_answer, str):
        final_answer = [final_answer]
    if not isinstance(final_answer, list) or not all(isinstance(a, str) for a in final_answer):
        raise Dropped("field 'final_answer' is not a list of strings")
    answers = [a.replace("$", "").strip().removesuffix(".").strip() for a in final_answer]
    answers = [a for a in answers if a]
    if not answers:
        raise Dropped("no answer")
    return ", ".join(answers)


def check_readable(truth: str) -> None:
    """Drop a ground truth math-verify reads only as text (no mathematical object)."""
    if all(isinstance(value, str) for value in parse(f"${truth}$", parsing_timeout=5)):
        raise Dropped("ground truth math-verify cannot parse")


def tolerance(error) -> float | None:
    """The numeric tolerance of the `error` field ("1e-1"; several equal values allowed), or None."""
    if error in (None, ""):
        return None
    try:
        values = {float(v) for v in str(error).split(",")}
    except ValueError:
        raise Dropped("field 'error' is not a number") from None
    if len(values) != 1 or not min(values) >= 0:
        raise Dropped("field 'error' holds several or negative tolerances")
    return values.pop()


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    if any(fields.get(name) for name in IMAGE_FIELDS) or fields.get("modality", "Text-only") != "Text-only":
        raise Dropped("problem with images")
    question = required_text(record, "question")
    context = fields.get("context") or ""
    solutions = fields.get("solution") or []
    if isinstance(solutions, str):
        solutions = [solutions]
    truth = ground_truth(fields.get("final_answer"))
    check_readable(truth)
    multiple = bool(fields.get("is_multiple_answer"))
    rule = {"items": "multiset" if multiple else "ordered", "tolerance": tolerance(fields.get("error"))}
    return math_row(
        data_source="olympiadbench",
        uid=str(fields.get("id", record.position)),
        split=split,
        statement=f"{context.strip()}\n\n{question}" if context.strip() else question,
        answer=truth,
        reference_solution=solutions[0] if solutions else "",
        metadata={
            "subfield": fields.get("subfield") or "",
            "answer_type": fields.get("answer_type") or "",
            "is_multiple_answer": multiple,
            "unit": fields.get("unit") or "",
            "error": fields.get("error") or "",
            "answer_rule": rule,
        },
    )


SOURCE = Source(name="olympiadbench", default_split="test", records=records, to_row=to_row)
