"""The single-hop QA benchmarks: NQ (open), TriviaQA, PopQA, Bamboogle, each also in FlashRAG's layout.

- NQ-open (`NQ-open.{train,dev}.jsonl`): `{"question", "answer": [str]}`, no id (the position
  is the id). The 3,610-question dev file is the set FlashRAG and Search-R1 call NQ `test`.
- TriviaQA: the release's one JSON object `{"Data": [...], "Version", ...}` (`qa/*.json`,
  `triviaqa-unfiltered/*.json`), questions `{Question, QuestionId, Answer: {Value, Aliases, …}}`;
  also the HF `trivia_qa` rows `{question, question_id, answer: {value, aliases, …}}`. The golden
  answers are the value followed by its aliases (as DPR and FlashRAG score it).
- PopQA (`popQA.tsv` columns, HF `akariasai/PopQA`): `possible_answers` is a string holding a
  JSON list; subject, relation, object and their popularity go to metadata.
- Bamboogle: the raw sheet export (a CSV without a header, question in column 0, the answer in
  column 4, an alternative answer in column 5), the HF rows `{Question, Answer}` (extra fields
  ignored) or R1-Searcher's `{idx, question, answer}`. Bamboogle has no ids: the position is the
  id in every layout, so they give the same rows. One answer is "George VI" with a line break.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import DataError
from data_prep.qa import Question, qa_source, release_records
from data_prep.records import Record
from data_prep.source import json_field

POPQA_METADATA = ("subj", "prop", "obj", "s_wiki_title", "o_wiki_title", "s_pop", "o_pop")


def nq_question(fields: dict) -> Question | None:
    if "question" not in fields or "answer" not in fields:
        return None
    return Question(question=fields["question"], answers=fields["answer"])


def triviaqa_records(path: Path, split: str) -> Iterator[Record]:
    """The questions of the release files' `Data` lists, or the records themselves (other layouts)."""
    position = 0
    for record in release_records(path, split):
        data = record.fields.get("Data")
        if not isinstance(data, list):
            yield Record(record.fields, position, record.where)
            position += 1
            continue
        for number, question in enumerate(data):
            where = f"{record.where}: Data[{number}]"
            if not isinstance(question, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(question).__name__}")
            yield Record(question, position, where)
            position += 1


def triviaqa_question(fields: dict) -> Question | None:
    if "Question" in fields and isinstance(fields.get("Answer"), dict):
        question, uid, answer = fields["Question"], fields.get("QuestionId"), fields["Answer"]
        value, aliases, kind = answer.get("Value"), answer.get("Aliases"), answer.get("Type")
        source = fields.get("QuestionSource")
    elif "question" in fields and isinstance(fields.get("answer"), dict):
        question, uid, answer = fields["question"], fields.get("question_id"), fields["answer"]
        value, aliases, kind = answer.get("value"), answer.get("aliases"), answer.get("type")
        source = fields.get("question_source")
    else:
        return None
    answers = ([value] if value is not None else []) + list(aliases or [])
    return Question(question=question, answers=answers, uid=uid, metadata={"type": kind, "source": source})


def popqa_question(fields: dict) -> Question | None:
    if "question" not in fields or "possible_answers" not in fields:
        return None
    return Question(
        question=fields["question"],
        answers=json_field(fields["possible_answers"], "possible_answers"),
        uid=fields.get("id"),
        metadata={name: fields.get(name) for name in POPQA_METADATA},
    )


def bamboogle_records(path: Path, split: str) -> Iterator[Record]:
    if path.suffix == ".csv":
        return _sheet_records(path)
    return release_records(path, split)


def bamboogle_question(fields: dict) -> Question | None:
    for question, answer in (("Question", "Answer"), ("question", "answer")):
        if question in fields and answer in fields:
            answers = [fields[answer], *fields.get("alternative_answers", [])]
            return Question(question=fields[question], answers=answers)
    return None


def _sheet_records(path: Path) -> Iterator[Record]:
    """The rows of the sheet export as `{Question, Answer, alternative_answers}` records."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            line = 1
            for position, row in enumerate(reader):
                where = f"{path}:{line}"
                line = reader.line_num + 1
                if len(row) < 5:
                    raise DataError(f"{where}: expected the sheet's columns (question first, answer fifth)")
                fields = {"Question": row[0], "Answer": row[4]}
                fields["alternative_answers"] = [row[5]] if len(row) > 5 and row[5].strip() else []
                yield Record(fields, position, where)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} cannot be decoded)") from None
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror})") from None
    except csv.Error as e:
        raise DataError(f"{path}: not a CSV file ({e})") from None


NQ = qa_source("nq", "test", nq_question, "NQ-open's {question, answer}")
TRIVIAQA = qa_source(
    "triviaqa", "test", triviaqa_question, "TriviaQA's {Question, QuestionId, Answer}", records=triviaqa_records
)
POPQA = qa_source("popqa", "test", popqa_question, "PopQA's {question, possible_answers}")
BAMBOOGLE = qa_source(
    "bamboogle", "test", bamboogle_question, "Bamboogle's {Question, Answer}", records=bamboogle_records
)
