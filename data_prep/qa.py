"""What the question-answering converters share: FlashRAG's layout, golden answers, the Source.

Every QA benchmark is read in its own release layout and in FlashRAG's re-packaging, rows
`{"id", "question", "golden_answers", "metadata"}` (`metadata` optional; Search-R1's processed
parquet keeps these columns, with "?" appended to its questions). A row becomes a `qa` row of
data_prep.schema: the question (stripped) as the statement, the golden answers as a JSON list,
`data_source` the dataset's name (FlashRAG's and Search-R1's), the dataset's id, or the record's
position where the release has none. Rows naming another dataset in a `data_source` column
(Search-R1's merged test file) are dropped and counted, so each dataset's rows can be taken from it.

Golden answers are stripped of surrounding whitespace (Bamboogle's "George VI\\n"); blank ones
and repeats are removed, the order kept. A record in neither layout stops the conversion
(DataError naming the file and row); one with an empty question or no answer is dropped and
counted. Duplicates are rows with the same question AND the same golden answers: benchmarks
such as PopQA ask one question about different entities of the same name, with different
answers, and keep every such row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.errors import DataError, Dropped
from data_prep.records import Record, data_files, read_records
from data_prep.schema import qa_row
from data_prep.source import Source

# the fields holding a question's paragraphs: large, and read by `python -m data_prep corpus`
PARAGRAPH_FIELDS = ("context", "paragraphs")


@dataclass(frozen=True)
class Question:
    """One benchmark question as its release gives it; `uid` None where the release has no id."""

    question: object
    answers: object
    uid: object = None
    metadata: dict = field(default_factory=dict)


def qa_source(
    name: str,
    default_split: str,
    release: Callable[[dict], Question | None],
    layout: str,
    records: Callable[[Path, str], Iterator[Record]] | None = None,
) -> Source:
    """The Source of a QA benchmark whose release records `release` reads (None: not its layout).

    `layout` names the release fields for the message when a record is in neither layout;
    `records` reads the input (default `release_records`).
    """

    def to_row(record: Record, split: str) -> dict:
        fields = record.fields
        other = fields.get("data_source")
        if isinstance(other, str) and other != name:
            raise Dropped(f"a row of another dataset (data_source {other!r})")
        item = flashrag_question(fields) if is_flashrag(fields) else release(fields)
        if item is None:
            raise DataError(
                f"{record.where}: not a {name} record: expected {layout} or FlashRAG's"
                f" {{id, question, golden_answers}} (fields: {', '.join(sorted(map(str, fields)))})"
            )
        if not isinstance(item.question, str):
            raise Dropped("question is not a string")
        question = item.question.strip()
        if not question:
            raise Dropped("empty question")
        answers = clean_answers(item.answers)
        if not answers:
            raise Dropped("no golden answer")
        return qa_row(
            data_source=name,
            uid=str(record.position if item.uid is None else item.uid),
            split=split,
            question=question,
            answers=answers,
            metadata=item.metadata,
        )

    return Source(
        name=name,
        default_split=default_split,
        records=records or release_records,
        to_row=to_row,
        duplicate_key=question_and_answers,
        duplicate_reason="duplicate question and golden answers",
    )


def release_records(path: Path, split: str) -> Iterator[Record]:
    """The records of a file, or of a folder's files named by split (FlashRAG's `test.jsonl`, …)."""
    return read_records(data_files(path, split))


def is_flashrag(fields: dict) -> bool:
    return "question" in fields and "golden_answers" in fields


def flashrag_question(fields: dict) -> Question:
    metadata = fields.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return Question(
        question=fields["question"],
        answers=fields["golden_answers"],
        uid=fields.get("id"),
        metadata={k: v for k, v in metadata.items() if k not in PARAGRAPH_FIELDS},
    )


def clean_answers(answers) -> list[str]:
    """The golden answers stripped, without blanks and repeats; Dropped unless a list of strings."""
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list | tuple) or not all(isinstance(a, str) for a in answers):
        raise Dropped("golden answers are not a list of strings")
    return list(dict.fromkeys(a.strip() for a in answers if a.strip()))


def question_and_answers(row: dict) -> str:
    """The duplicate key of a qa row: its question and its golden answers."""
    return f"{row['extra_info']['problem']}\n{row['reward_model']['ground_truth']}"
