"""Passage corpora in wiki-18's layout for the search tools: wiki-18 itself, or the paragraphs
that multi-hop questions ship with (a small corpus of real text for local tests).

wiki-18 (Wikipedia of December 2018 in 100-word passages, Search-R1's and FlashRAG's retrieval
corpus) is JSONL `{"id", "contents"}`, `contents` being a title line, a newline and the passage
text. Most title lines are wrapped in double quotes (`"Evan Morris"`), some are bare
(`Absalon`); one pair of surrounding quotes is removed. The text is kept as it is (DPR's
doubled quotes `""Havn""` included).

Both write JSONL rows `{"id", "contents", "title", "text"}` with `contents` always in the quoted
form `"Title"\\ntext`, so wiki-18 readers read them unchanged and others need not parse titles.

- `normalise_wiki18`: every passage of a wiki-18 file, in order, ids kept (as strings). It
  streams: the 21M-passage file never has to fit in memory.
- `corpus_from_questions`: the context paragraphs of HotpotQA, 2WikiMultihopQA or MuSiQue
  question files (`data_prep.multihop_qa.paragraphs`), each distinct (title, text) once in
  order of first appearance (text compared with whitespace collapsed), ids "0", "1", …;
  paragraphs with no text are skipped.

A record in neither layout stops with DataError naming the file and row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from data_prep.errors import DataError
from data_prep.multihop_qa import paragraphs
from data_prep.records import data_files, read_records
from data_prep.writer import write_jsonl


@dataclass
class CorpusSummary:
    """What a corpus command read and wrote; `questions` is None for wiki-18 input."""

    questions: int | None = None
    read: int = 0
    written: int = 0
    bare_titles: int = 0
    repeats: int = 0
    empty: int = 0

    def format(self) -> str:
        if self.questions is not None:
            return (
                f"corpus: {self.questions} questions, {self.read} paragraphs read, {self.written} distinct written"
                f" ({self.repeats} repeats, {self.empty} without text)"
            )
        return f"wiki-18: {self.read} passages read, {self.written} written ({self.bare_titles} titles without quotes)"


def parse_contents(contents: str) -> tuple[str, str]:
    """(title, text) of a wiki-18 `contents`; ValueError when it has no title line."""
    title, newline, text = contents.partition("\n")
    if not newline:
        raise ValueError("no newline between the title and the text")
    if len(title) >= 2 and title.startswith('"') and title.endswith('"'):
        title = title[1:-1]
    return title, text


def passage(uid: str, title: str, text: str) -> dict:
    return {"id": uid, "contents": f'"{title}"\n{text}', "title": title, "text": text}


def normalise_wiki18(input_path: str | Path, output_path: str | Path) -> CorpusSummary:
    summary = CorpusSummary()

    def passages() -> Iterator[dict]:
        for record in read_records(data_files(Path(input_path), None)):
            uid, contents = record.fields.get("id"), record.fields.get("contents")
            if uid is None or not isinstance(contents, str):
                raise DataError(f"{record.where}: not a wiki-18 passage: expected {{id, contents}}")
            try:
                title, text = parse_contents(contents)
            except ValueError as e:
                raise DataError(f"{record.where}: field 'contents': {e}") from None
            summary.read += 1
            summary.bare_titles += not contents.startswith('"')
            yield passage(str(uid), title, text)

    summary.written = write_jsonl(passages(), output_path)
    return summary


def corpus_from_questions(input_paths: Sequence[str | Path], output_path: str | Path) -> CorpusSummary:
    summary = CorpusSummary(questions=0)
    seen: set[tuple[str, str]] = set()

    def passages() -> Iterator[dict]:
        for path in input_paths:
            for record in read_records(data_files(Path(path), None)):
                found = paragraphs(record.fields)
                if found is None:
                    raise DataError(
                        f"{record.where}: no paragraphs: expected a HotpotQA or 2WikiMultihopQA 'context'"
                        " or MuSiQue 'paragraphs' (in FlashRAG's rows, under 'metadata')"
                    )
                summary.questions += 1
                for title, text in found:
                    summary.read += 1
                    key = (title.strip(), " ".join(text.split()))
                    if not key[1]:
                        summary.empty += 1
                    elif key in seen:
                        summary.repeats += 1
                    else:
                        seen.add(key)
                        yield passage(str(len(seen) - 1), title.strip(), text.strip())

    summary.written = write_jsonl(passages(), output_path)
    return summary
