"""One attempt of a search system at one QA question: the typed record, its JSON line, its grouping.

An evaluation of the search workflow (`python -m verl_masopd.eval`, eval/qa_episodes.py) writes
`qa_attempts.jsonl` in its --out folder, one JSON object per line, one line per attempt (the k
episodes of a question are its k attempts, k lines); the report reads it back:

    {"dataset": "nq", "question": "test_17", "attempt": 0, "em": true, "sub_em": true,
     "relaxed_em": true, "failure": null, "tokens_generated": 812, "tokens_read": 3904}

  dataset           the benchmark's name, the question's `data_source` (nq, triviaqa, popqa,
                    hotpotqa, 2wiki, musique, bamboogle)
  question          the question's id, unique within its dataset
  attempt           the attempt's number (an integer ≥ 0), unique within its question
  em, sub_em,       the attempt's answer scored by exact match, sub-exact match and relaxed exact
  relaxed_em        match against the golden answers (`verl_masopd/verify/qa_match.py`): true or
                    false, the numbers 1 and 0 read as true and false
  failure           null, or why the attempt has no tagged answer: "no_candidate" (the team produced
                    no candidate answer), "empty_candidate" (an `<answer>` tag with empty content),
                    "untagged" (text without an `<answer>` tag; relaxed EM may still read it)
  tokens_generated  tokens the episode's agents generated, over all their calls (an integer ≥ 0)
  tokens_read       tokens the episode's agents read, over all their calls: each call's context and
                    the tool observations inside its reply (an integer ≥ 0; eval/qa_episodes.py)

Other fields are ignored, so a line may carry the answer, the golden answers or the transcript.
Blank lines are skipped. Exact match implies the other two (an answer equal to a golden one
contains it and is equal under the wider normalisation), so a record with em true and sub_em or
relaxed_em false is refused. A line that is not such an object raises ValueError naming the
source and the line number.

A system's attempts are grouped by dataset, then question (`by_question`): every question of a
system has the same number k of attempts, each attempt number once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

QA_ATTEMPTS_FILE = "qa_attempts.jsonl"
FAILURES = ("no_candidate", "empty_candidate", "untagged")
FIELDS = ("dataset", "question", "attempt", "em", "sub_em", "relaxed_em", "failure", "tokens_generated", "tokens_read")


@dataclass(frozen=True)
class QaAttempt:
    dataset: str
    question: str
    attempt: int
    em: bool
    sub_em: bool
    relaxed_em: bool
    failure: str | None
    tokens_generated: int
    tokens_read: int

    def __post_init__(self) -> None:
        for name in ("dataset", "question"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("attempt", "tokens_generated", "tokens_read"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer ≥ 0, got {value!r}")
        for name in ("em", "sub_em", "relaxed_em"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean, got {getattr(self, name)!r}")
        if self.failure is not None and self.failure not in FAILURES:
            raise ValueError(f"failure must be null or one of {', '.join(FAILURES)}, got {self.failure!r}")
        if self.em and not (self.sub_em and self.relaxed_em):
            raise ValueError("em is true but sub_em or relaxed_em is false (exact match implies both)")

    @property
    def rescued(self) -> bool:
        """Untagged, EM 0, relaxed EM 1: the answer relaxed EM read where the tag was missing."""
        return self.failure == "untagged" and not self.em and self.relaxed_em

    @classmethod
    def from_json(cls, obj: object) -> QaAttempt:
        """The attempt of one decoded JSON line (layout in the module docstring)."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        missing = [name for name in FIELDS if name not in obj]
        if missing:
            raise ValueError(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        values = {name: obj[name] for name in FIELDS}
        for name in ("em", "sub_em", "relaxed_em"):
            values[name] = _flag(name, values[name])
        return cls(**values)


def parse_attempts(lines: Iterable[str], source: str = "<lines>") -> list[QaAttempt]:
    """The attempts of JSON lines; a bad line raises ValueError "SOURCE:N: why" (N from 1)."""
    attempts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            attempts.append(QaAttempt.from_json(json.loads(line)))
        except ValueError as e:
            raise ValueError(f"{source}:{number}: {e}") from None
    return attempts


def read_attempts(path: str | Path) -> list[QaAttempt]:
    """The attempts of a JSON-lines file."""
    with open(path, encoding="utf-8") as f:
        return parse_attempts(f, str(path))


def write_attempts(attempts: Iterable[QaAttempt], path: str | Path) -> None:
    """`attempts` as a JSON-lines file, one object of the FIELDS per line, in order."""
    with open(path, "w", encoding="utf-8") as f:
        for a in attempts:
            f.write(json.dumps(asdict(a)) + "\n")


def by_question(attempts: Iterable[QaAttempt]) -> dict[str, dict[str, tuple[QaAttempt, ...]]]:
    """{dataset: {question: its attempts, by attempt number}}, datasets and questions in the order
    they first appear. ValueError when an attempt number repeats within a question, or when two
    questions have different numbers of attempts (both named)."""
    grouped: dict[str, dict[str, dict[int, QaAttempt]]] = {}
    for a in attempts:
        seen = grouped.setdefault(a.dataset, {}).setdefault(a.question, {})
        if a.attempt in seen:
            raise ValueError(f"dataset {a.dataset!r}, question {a.question!r}: attempt {a.attempt} twice")
        seen[a.attempt] = a
    first = None
    for dataset, questions in grouped.items():
        for question, found in questions.items():
            if first is None:
                first = (dataset, question, len(found))
            elif len(found) != first[2]:
                raise ValueError(
                    f"dataset {dataset!r}, question {question!r} has {len(found)} attempts, "
                    f"dataset {first[0]!r}, question {first[1]!r} has {first[2]}: every question needs the same k"
                )
    return {
        dataset: {question: tuple(found[n] for n in sorted(found)) for question, found in questions.items()}
        for dataset, questions in grouped.items()
    }


def attempts_per_question(grouped: dict[str, dict[str, tuple[QaAttempt, ...]]]) -> int:
    """k of `by_question`'s grouping (ValueError when it holds no attempt)."""
    for questions in grouped.values():
        for found in questions.values():
            return len(found)
    raise ValueError("no attempts")


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be true or false (or 1 or 0), got {value!r}")
