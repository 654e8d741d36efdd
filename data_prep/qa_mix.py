"""Search-R1's training mix: NQ train followed by HotpotQA train, without the test questions.

Each file is converted as `python -m data_prep nq|hotpotqa --split train` converts it (either
layout, duplicates dropped). A training row whose question is a question of any `exclude` file
is removed and counted per dataset. Questions are compared after
`verl_masopd.verify.qa_match.relaxed_normalize` (case, punctuation, articles, accents, number
words), so Search-R1's "?"-appended questions match the released ones. The exclude files are
parquet files written by data_prep (the question is `extra_info.problem`) or any parquet file
with a `question` column (FlashRAG's and Search-R1's test files).

Ids become `<data_source>:<id>` ("nq:17", "hotpotqa:5a8b..."): both datasets number from 0 where
they have no ids of their own, and the trainer needs ids unique across the file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.convert import collect
from data_prep.errors import DataError
from data_prep.sources import SOURCES
from data_prep.summary import Summary
from data_prep.writer import write_rows
from verl_masopd.verify.qa_match import relaxed_normalize

SPLIT = "train"


@dataclass
class MixSummary:
    """Each dataset's conversion summary, the rows removed as test questions, the rows written."""

    sources: list[Summary] = field(default_factory=list)
    test_questions: int = 0
    removed: Counter = field(default_factory=Counter)
    written: int = 0

    def format(self) -> str:
        per_dataset = ", ".join(f"{s.dataset}: {self.removed[s.dataset]}" for s in self.sources)
        return "\n".join(
            [s.format() for s in self.sources]
            + [
                f"removed {sum(self.removed.values())} training rows whose question is one of the"
                f" {self.test_questions} test questions ({per_dataset})",
            ]
        )


def question_key(question: str) -> str:
    return relaxed_normalize(question)


def excluded_questions(paths: Sequence[str | Path]) -> set[str]:
    """The normalised questions of the exclude files."""
    keys = set()
    for path in map(Path, paths):
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        try:
            schema = pq.read_schema(path)
            if "question" in schema.names:
                questions = pq.read_table(path, columns=["question"]).column("question").to_pylist()
            elif "extra_info" in schema.names:
                extra = pq.read_table(path, columns=["extra_info"]).column("extra_info").to_pylist()
                questions = [(e or {}).get("problem") for e in extra]
            else:
                raise DataError(f"{path}: no 'question' column and no data_prep 'extra_info.problem'")
        except (pa.ArrowInvalid, OSError) as e:
            raise DataError(f"{path}: not a readable parquet file ({e})") from None
        for number, question in enumerate(questions):
            if not isinstance(question, str) or not question.strip():
                raise DataError(f"{path}: row {number}: no question")
            keys.add(question_key(question))
    return keys


def train_mix(nq: str | Path, hotpotqa: str | Path, exclude: Sequence[str | Path], output: str | Path) -> MixSummary:
    """Write the mix to `output` and return its summary; nothing is written when no row is left."""
    summary = MixSummary()
    excluded = excluded_questions(exclude)
    summary.test_questions = len(excluded)
    rows = []
    for name, path in (("nq", nq), ("hotpotqa", hotpotqa)):
        converted, source_summary = collect(SOURCES[name], path, SPLIT)
        summary.sources.append(source_summary)
        for row in converted:
            extra = row["extra_info"]
            if question_key(extra["problem"]) in excluded:
                summary.removed[name] += 1
                continue
            extra["id"] = f"{name}:{extra['id']}"
            extra["index"] = len(rows)
            rows.append(row)
    if not rows:
        raise DataError(f"{output}: every training row is a test question, nothing written\n{summary.format()}")
    write_rows(rows, output)
    summary.written = len(rows)
    return summary
