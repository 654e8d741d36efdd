"""The tiny world's search questions: one-hop and two-hop questions on the knowledge base
(search_kb.py), answered from its passages, scored by exact match on golden answers.

A one-hop question (FACTS) asks one fact of one entity ("Where was verad exith born?"); the
fact is stated in the entity's own passage. A two-hop question (CHAINS) asks a fact of the
entity another fact names, the bridge ("Which country was verad exith born in?": the city
verad exith was born in, exum, then exum's country); its facts are in the subject's and the
bridge's passages, and its sub-questions are the two one-hop questions ("Where was verad exith
born?", "Which country is exum in?"), the second formed from the first's answer. A chain is not
asked of a subject it would answer with (the capital of the country a capital is in). Golden
answers: the fact as the passage states it, a length also without its unit (["940 km", "940"]).

Question i (a function of i alone): hops HOPS[i % 2]; a question type drawn from
`random.Random(f"tiny-search-{i}")`, then its subject. Index ranges: training questions are
[0, VALIDATION_START), validation [VALIDATION_START, HELDOUT_START), held-out from HELDOUT_START
(math_tasks' convention). The distinct questions are split between the ranges too: a question
(type t, subject s) belongs to the range `partition(t, s)` names, from the first 8 hex digits h
of sha256("t|s"): h mod 10 < 8 training, = 8 validation, = 9 held-out. So a held-out question is
never asked in training, though the facts it rests on may be asked there on their own.

Rows are `qa` rows of data_prep.schema: the question as the statement, the golden answers as a
JSON list, data_source `tiny_search_{hops}hop`, uid `tiny-search-{i}`, extra_info.index i and
metadata {"hops", "type", "subject", "passages" (the ids of the gold passages, one per hop),
and for two hops "bridge" and "sub_questions"}.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from data_prep.schema import qa_row
from data_prep.writer import write_rows
from verl_masopd.retrieval.index import build_index
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.tiny_world.search_kb import (
    CITY,
    COUNTRY,
    PERSON,
    RELATION_TARGETS,
    RIVER,
    Entity,
    knowledge_base,
    write_corpus,
)

VALIDATION_START = 500_000
HOPS = (1, 2)
DATA_SOURCE = "tiny_search_{hops}hop"
TRAIN, VALIDATION, HELDOUT = "train", "validation", "heldout"
PARTITION_BUCKETS = {**dict.fromkeys(range(8), TRAIN), 8: VALIDATION, 9: HELDOUT}


@dataclass(frozen=True)
class Fact:
    """A one-hop question type: the fact `relation` of an entity of `kind`, asked as `question`
    ({s} the entity's name)."""

    kind: str
    relation: str
    question: str

    @property
    def name(self) -> str:
        return f"{self.kind}.{self.relation}"


@dataclass(frozen=True)
class Chain:
    """A two-hop question type: `second` asked of the entity that `first` names, as `question`."""

    first: Fact
    second: Fact
    question: str

    def __post_init__(self):
        if RELATION_TARGETS.get((self.first.kind, self.first.relation)) != self.second.kind:
            raise ValueError(f"{self.first.name} does not name a {self.second.kind}")

    @property
    def name(self) -> str:
        return f"{self.first.name}>{self.second.name}"


BORN = Fact(PERSON, "city", "Where was {s} born?")
BORN_YEAR = Fact(PERSON, "year", "When was {s} born?")
TEACHER = Fact(PERSON, "teacher", "Who taught {s}?")
CITY_COUNTRY = Fact(CITY, "country", "Which country is {s} in?")
CITY_RIVER = Fact(CITY, "river", "Which river is {s} on?")
FOUNDED = Fact(CITY, "year", "When was {s} founded?")
CAPITAL = Fact(COUNTRY, "capital", "What is the capital of {s}?")
MAIN_RIVER = Fact(COUNTRY, "river", "What is the main river of {s}?")
FLAG = Fact(COUNTRY, "colour", "What colour is the flag of {s}?")
RIVER_COUNTRY = Fact(RIVER, "country", "Which country is the {s} in?")
LENGTH = Fact(RIVER, "length", "How long is the {s}?")
WATER = Fact(RIVER, "colour", "What colour is the water of the {s}?")
LIKES = Fact(PERSON, "colour", "What colour does {s} like?")
FACTS = (
    BORN,
    BORN_YEAR,
    LIKES,
    TEACHER,
    CITY_COUNTRY,
    CITY_RIVER,
    FOUNDED,
    CAPITAL,
    MAIN_RIVER,
    FLAG,
    RIVER_COUNTRY,
    LENGTH,
    WATER,
)
CHAINS = (
    Chain(BORN, CITY_COUNTRY, "Which country was {s} born in?"),
    Chain(BORN, CITY_RIVER, "On which river is the city where {s} was born?"),
    Chain(BORN, FOUNDED, "When was the city where {s} was born founded?"),
    Chain(TEACHER, BORN, "Where was the teacher of {s} born?"),
    Chain(TEACHER, BORN_YEAR, "When was the teacher of {s} born?"),
    Chain(CITY_COUNTRY, CAPITAL, "What is the capital of the country {s} is in?"),
    Chain(CITY_COUNTRY, FLAG, "What colour is the flag of the country {s} is in?"),
    Chain(CITY_RIVER, LENGTH, "How long is the river {s} is on?"),
    Chain(RIVER_COUNTRY, CAPITAL, "What is the capital of the country the {s} is in?"),
    Chain(CAPITAL, FOUNDED, "When was the capital of {s} founded?"),
    Chain(MAIN_RIVER, LENGTH, "How long is the main river of {s}?"),
    Chain(CITY_RIVER, WATER, "What colour is the water of the river {s} is on?"),
)
TYPES = {1: FACTS, 2: CHAINS}


@dataclass(frozen=True)
class SearchTask:
    """Question i: its text, golden answers, and the passages (one per hop) that state its facts."""

    index: int
    hops: int
    type: str
    question: str
    answers: tuple[str, ...]
    subject: str
    bridge: str | None
    passages: tuple[str, ...]
    sub_questions: tuple[str, ...]


def golden_answers(entity: Entity, relation: str) -> tuple[str, ...]:
    """The fact as its passage states it; a river's length also without the unit."""
    value = entity.facts[relation]
    return (f"{value} km", value) if relation == "length" else (value,)


def partition(type_name: str, subject: str) -> str:
    """The index range whose questions may ask (type, subject): TRAIN, VALIDATION or HELDOUT."""
    digest = hashlib.sha256(f"{type_name}|{subject}".encode()).hexdigest()
    return PARTITION_BUCKETS[int(digest[:8], 16) % 10]


def index_range(i: int) -> str:
    """The range question i belongs to."""
    if i < 0:
        raise ValueError(f"question index must be >= 0, got {i}")
    if i < VALIDATION_START:
        return TRAIN
    return VALIDATION if i < HELDOUT_START else HELDOUT


def subjects(question_type: Fact | Chain) -> list[str]:
    """The entities a question type asks about, in the knowledge base's order: those with the
    fact, and for a chain not those it would answer with themselves (the capital of the country
    a capital is in)."""
    kb = knowledge_base()
    first = question_type.first if isinstance(question_type, Chain) else question_type
    found = [e.name for e in kb.of_kind(first.kind) if first.relation in e.facts]
    if isinstance(question_type, Fact):
        return found
    second = question_type.second
    return [s for s in found if kb.entity(kb.entity(s).facts[first.relation]).facts[second.relation] != s]


@functools.cache
def _subjects_in(type_name: str, part: str) -> tuple[str, ...]:
    question_type = next(t for t in (*FACTS, *CHAINS) if t.name == type_name)
    return tuple(s for s in subjects(question_type) if partition(type_name, s) == part)


def make_task(index: int, question_type: Fact | Chain, subject: str) -> SearchTask:
    """The question of `question_type` about `subject`, numbered `index`."""
    kb = knowledge_base()
    entity = kb.entity(subject)
    if isinstance(question_type, Fact):
        return SearchTask(
            index=index,
            hops=1,
            type=question_type.name,
            question=question_type.question.format(s=subject),
            answers=golden_answers(entity, question_type.relation),
            subject=subject,
            bridge=None,
            passages=(kb.passage_id(subject),),
            sub_questions=(),
        )
    first, second = question_type.first, question_type.second
    bridge = entity.facts[first.relation]
    return SearchTask(
        index=index,
        hops=2,
        type=question_type.name,
        question=question_type.question.format(s=subject),
        answers=golden_answers(kb.entity(bridge), second.relation),
        subject=subject,
        bridge=bridge,
        passages=(kb.passage_id(subject), kb.passage_id(bridge)),
        sub_questions=(first.question.format(s=subject), second.question.format(s=bridge)),
    )


def task(i: int) -> SearchTask:
    """Question i (a function of i alone)."""
    part = index_range(i)
    rng = random.Random(f"tiny-search-{i}")
    hops = HOPS[i % len(HOPS)]
    types = [t for t in TYPES[hops] if _subjects_in(t.name, part)]
    question_type = rng.choice(types)
    return make_task(i, question_type, rng.choice(_subjects_in(question_type.name, part)))


def search_rows(start: int, count: int, split: str) -> list[dict]:
    """Questions [start, start + count) as qa rows of the project's schema (data_prep.schema)."""
    rows = []
    for i in range(start, start + count):
        t = task(i)
        metadata = {"hops": t.hops, "type": t.type, "subject": t.subject, "passages": list(t.passages)}
        if t.bridge is not None:
            metadata |= {"bridge": t.bridge, "sub_questions": list(t.sub_questions)}
        row = qa_row(
            data_source=DATA_SOURCE.format(hops=t.hops),
            uid=f"tiny-search-{i}",
            split=split,
            question=t.question,
            answers=list(t.answers),
            metadata=metadata,
        )
        row["extra_info"]["index"] = i
        rows.append(row)
    return rows


def write_search_data(out: str | Path, train: int, heldout: int, validation: int = 0, index: bool = True) -> dict:
    """Write the search world into `out`: `corpus.jsonl`, `train.parquet` (questions [0, train)),
    `heldout.parquet` ([HELDOUT_START, HELDOUT_START + heldout)), `validation.parquet` when
    `validation` > 0 ([VALIDATION_START, VALIDATION_START + validation)) and, with `index`, the
    BM25 index of the corpus in `index/` (verl_masopd.retrieval.build_index). Returns what it wrote."""
    if train > VALIDATION_START or validation > HELDOUT_START - VALIDATION_START:
        raise ValueError(
            f"at most {VALIDATION_START} training and {HELDOUT_START - VALIDATION_START} validation questions"
        )
    out = Path(out)
    written = {"corpus": str(out / "corpus.jsonl"), "passages": write_corpus(out / "corpus.jsonl")}
    files = [("train", 0, train, "train"), ("heldout", HELDOUT_START, heldout, "test")]
    if validation > 0:
        files.append(("validation", VALIDATION_START, validation, "validation"))
    for name, start, count, split in files:
        write_rows(search_rows(start, count, split), out / f"{name}.parquet")
        written[name] = str(out / f"{name}.parquet")
    if index:
        build_index(out / "corpus.jsonl", out / "index")
        written["index"] = str(out / "index")
    return written
