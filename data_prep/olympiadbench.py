"""OlympiadBench OE_TO_maths_en_COMP (OpenBMB release JSON, or the HF copy's rows).

`final_answer` is a list of strings, each usually wrapped in `$...$`; several answers of one
problem are packed into one string ("$69$,$84$", "1,3,5"). The ground truth drops every `$` and a
trailing period and joins the list with ", ", giving LaTeX such as "69,84" that math-verify reads
as the set {69, 84} once wrapped as "$69,84$". The `unit` is not part of the ground truth (it is
kept in metadata with `answer_type`, `is_multiple_answer` and the `error` tolerance). The HF copy's
rows with images or a modality other than text are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


def to_row(record: Record, split: str) -> dict:
    fields = record.fields
    if any(fields.get(name) for name in IMAGE_FIELDS) or fields.get("modality", "Text-only") != "Text-only":
        raise Dropped("problem with images")
    question = required_text(record, "question")
    context = fields.get("context") or ""
    solutions = fields.get("solution") or []
    if isinstance(solutions, str):
        solutions = [solutions]
    return math_row(
        data_source="olympiadbench",
        uid=str(fields.get("id", record.position)),
        split=split,
        statement=f"{context.strip()}\n\n{question}" if context.strip() else question,
        answer=ground_truth(fields.get("final_answer")),
        reference_solution=solutions[0] if solutions else "",
        metadata={
            "subfield": fields.get("subfield") or "",
            "answer_type": fields.get("answer_type") or "",
            "is_multiple_answer": bool(fields.get("is_multiple_answer")),
            "unit": fields.get("unit") or "",
            "error": fields.get("error") or "",
        },
    )


SOURCE = Source(name="olympiadbench", default_split="test", records=records, to_row=to_row)
