"""The tiny world's search knowledge base and questions: question i depends on i alone, the
index ranges and the distinct questions they ask are disjoint, every golden answer is stated in
its gold passage, two-hop answers follow the relation chain, questions and names are short in
tiny-tokenizer tokens, rows round-trip through the problem schema, and the corpus reads and
indexes with the retrieval package and retrieves as hand-checked."""

import json
import re

import pytest
import Stemmer

from data_prep.schema import read_problems
from data_prep.writer import write_rows
from verl_masopd.retrieval import BM25Index, build_index
from verl_masopd.retrieval.corpus import read_corpus
from verl_masopd.retrieval.index import SETTINGS
from verl_masopd.tiny_world.__main__ import main
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.tiny_world.models import build_tokenizer
from verl_masopd.tiny_world.search_kb import (
    KINDS,
    NAMESAKES,
    RELATION_TARGETS,
    SEED,
    knowledge_base,
    write_corpus,
)
from verl_masopd.tiny_world.search_tasks import (
    CHAINS,
    FACTS,
    HELDOUT,
    TRAIN,
    VALIDATION,
    VALIDATION_START,
    golden_answers,
    index_range,
    make_task,
    partition,
    search_rows,
    subjects,
    task,
)
from verl_masopd.verify.qa_match import exact_match, normalize_answer
from verl_masopd.workflows.problem import Problem

SAMPLE = [*range(0, 60), *range(VALIDATION_START, VALIDATION_START + 20), *range(HELDOUT_START, HELDOUT_START + 60)]
QUESTION_TOKEN_BUDGET = 32
ALL_QUESTIONS = [make_task(0, t, s) for t in (*FACTS, *CHAINS) for s in subjects(t)]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search-world")
    write_corpus(folder / "corpus.jsonl")
    assert build_index(folder / "corpus.jsonl", folder / "index")
    return BM25Index(folder / "index")


def _states(text: str, answer: str) -> bool:
    """Whether `answer` occurs in `text` as whole words, both SQuAD-normalised."""
    return f" {normalize_answer(answer)} " in f" {normalize_answer(text)} "


def test_question_i_depends_on_i_alone():
    assert [task(i) for i in SAMPLE] == [task(i) for i in SAMPLE]
    assert search_rows(0, 8, "train")[:5] == search_rows(0, 5, "train")
    assert [task(i).hops for i in range(6)] == [1, 2, 1, 2, 1, 2]
    assert task(4014).question == "Where was verad exith born?" and task(4014).answers == ("exum",)
    # hand-checked: enad exon was taught by lenelo ranron, born in 1826
    second = task(1)
    assert second.question == "When was the teacher of enad exon born?" and second.answers == ("1826",)
    assert second.sub_questions == ("Who taught enad exon?", "When was lenelo ranron born?")


def test_the_knowledge_base_is_a_function_of_the_seed():
    first = knowledge_base().corpus_rows()
    knowledge_base.cache_clear()
    assert knowledge_base().corpus_rows() == first
    assert SEED == 0 and len(first) == 1523
    counts = {kind: len(knowledge_base().of_kind(kind)) for kind in KINDS}
    assert counts == {"person": 240, "city": 48, "country": 12, "river": 24}


def test_index_ranges_and_their_distinct_questions_are_disjoint():
    assert [index_range(i) for i in (0, VALIDATION_START - 1, VALIDATION_START, HELDOUT_START - 1, HELDOUT_START)] == [
        TRAIN,
        TRAIN,
        VALIDATION,
        VALIDATION,
        HELDOUT,
    ]
    with pytest.raises(ValueError):
        index_range(-1)
    ranges = {
        TRAIN: range(0, 3000),
        VALIDATION: range(VALIDATION_START, VALIDATION_START + 1000),
        HELDOUT: range(HELDOUT_START, HELDOUT_START + 1000),
    }
    asked = {}
    for name, indices in ranges.items():
        tasks = [task(i) for i in indices]
        assert all(partition(t.type, t.subject) == name for t in tasks)
        asked[name] = {t.question for t in tasks}
    assert not asked[TRAIN] & asked[VALIDATION]
    assert not asked[TRAIN] & asked[HELDOUT]
    assert not asked[VALIDATION] & asked[HELDOUT]
    every = {partition(t.type, t.subject) for t in ALL_QUESTIONS}
    assert every == {TRAIN, VALIDATION, HELDOUT}


def test_every_golden_answer_is_stated_in_its_gold_passage():
    kb = knowledge_base()
    for t in ALL_QUESTIONS:
        gold = kb.passage(t.passages[-1])
        assert gold.title == (t.bridge or t.subject)
        assert t.answers and all(_states(gold.text, a) for a in t.answers), (t.question, t.answers, gold.text)
        assert exact_match(t.answers[0], list(t.answers))
        if t.hops == 2:
            assert _states(kb.passage(t.passages[0]).text, t.bridge), (t.question, t.bridge)
    lengths = [t for t in ALL_QUESTIONS if t.type.endswith("river.length")]
    assert lengths and all(t.answers == (f"{t.answers[1]} km", t.answers[1]) for t in lengths)


def test_two_hop_answers_follow_the_relation_chain():
    kb = knowledge_base()
    types = {c.name: c for c in CHAINS}
    two_hop = [t for t in ALL_QUESTIONS if t.hops == 2]
    assert {t.type for t in two_hop} == set(types)
    for t in two_hop:
        chain = types[t.type]
        subject = kb.entity(t.subject)
        assert subject.kind == chain.first.kind
        assert t.bridge == subject.facts[chain.first.relation]
        bridge = kb.entity(t.bridge)
        assert bridge.kind == RELATION_TARGETS[(chain.first.kind, chain.first.relation)] == chain.second.kind
        assert t.answers == golden_answers(bridge, chain.second.relation)
        assert t.subject not in t.answers
        first, second = make_task(0, chain.first, t.subject), make_task(0, chain.second, t.bridge)
        assert first.answers == (t.bridge,) and second.answers == t.answers
        assert t.sub_questions == (first.question, second.question)
        assert t.passages == (first.passages[0], second.passages[0])


def test_the_world_is_consistent():
    kb = knowledge_base()
    for city in kb.of_kind("city"):
        assert kb.entity(city.facts["river"]).facts["country"] == city.facts["country"]
    for country in kb.of_kind("country"):
        assert kb.entity(country.facts["capital"]).facts["country"] == country.name
        assert kb.entity(country.facts["river"]).facts["country"] == country.name
    for person in kb.of_kind("person"):
        if "teacher" in person.facts:
            assert int(kb.entity(person.facts["teacher"]).facts["year"]) <= int(person.facts["year"]) - 20


def test_questions_and_names_are_short_in_tiny_tokens():
    tokenizer = build_tokenizer()
    lengths = [len(tokenizer(t.question)["input_ids"]) for t in ALL_QUESTIONS]
    assert max(lengths) <= QUESTION_TOKEN_BUDGET, max(lengths)
    words = {w for e in knowledge_base().entities for w in e.name.split()}
    name_tokens = [len(tokenizer(" " + w)["input_ids"]) for w in words]
    assert max(name_tokens) <= 4 and name_tokens.count(2) >= 0.95 * len(words)
    passages = knowledge_base().passages
    assert max(len(p.text.split()) for p in passages) <= 40
    assert max(len(tokenizer(p.contents)["input_ids"]) for p in passages) <= 96


def test_names_are_distinct_words_for_bm25():
    """Every name word is its own Snowball stem and no stop word, so BM25 tells the names apart."""
    stemmer = Stemmer.Stemmer(SETTINGS["tokenizer"]["stemmer"])
    kb = knowledge_base()
    for entity in kb.entities:
        assert all(stemmer.stemWord(word) == word and len(word) >= 4 for word in entity.name.split())
    places = [e.name for e in kb.entities if e.kind != "person"]
    persons = [e.name for e in kb.of_kind("person")]
    assert len(set(places)) == len(places) and len(set(persons)) == len(persons)
    nouns = {noun for kind in NAMESAKES.values() for noun in kind}
    assert not nouns & set(places) and len(nouns) == 4 * 5


def test_rows_round_trip_through_the_problem_schema(tmp_path):
    rows = search_rows(0, 20, "train") + search_rows(HELDOUT_START, 20, "test")
    write_rows(rows, tmp_path / "rows.parquet")
    problems = read_problems(tmp_path / "rows.parquet")
    for row, problem in zip(rows, problems, strict=True):
        assert problem == Problem.from_row(row)
        i = row["extra_info"]["index"]
        t = task(i)
        assert problem.uid == f"tiny-search-{i}" and problem.domain == "qa"
        assert problem.statement == t.question and problem.answers == t.answers
        assert problem.data_source == f"tiny_search_{t.hops}hop"
        metadata = json.loads(row["extra_info"]["metadata"])
        assert metadata["hops"] == t.hops and metadata["type"] == t.type and metadata["passages"] == list(t.passages)
        assert ("sub_questions" in metadata) == (t.hops == 2)


def test_the_corpus_reads_and_indexes_with_the_retrieval_package(index, tmp_path):
    write_corpus(tmp_path / "corpus.jsonl")
    passages = list(read_corpus(tmp_path / "corpus.jsonl"))
    kb = knowledge_base()
    assert [pid for pid, _ in passages] == [str(n) for n in range(len(kb.passages))]
    assert [contents for _, contents in passages] == [p.contents for p in kb.passages]
    assert all(re.fullmatch(r'"[a-z ()]+"\n[a-z0-9 ,.]+', contents) for _, contents in passages)
    assert len(index) == len(kb.passages)
    assert index.passage(int(kb.passage_id("exum"))).title == "exum"


def test_a_one_hop_question_retrieves_its_gold_passage(index):
    # hand-checked: exum's own passage ranks first, ahead of its namesakes (tower, mill, school)
    found = index.search(["Which country is exum in?"], 3)[0]
    assert found[0].title == "exum"
    assert found[0].text == "exum is a city in the country verbo, founded in 1065. exum lies on the river ranay."
    assert {p.title for p in found[1:]} <= {f"exum ({noun})" for noun in NAMESAKES["city"]}


def test_namesakes_outscore_a_person_until_the_query_names_the_kind(index):
    # hand-checked: "Where was verad exith born?" finds three of verad exith's four shorter namesakes
    gold = knowledge_base().passage_id("verad exith")
    plain = [p.id for p in index.search(["Where was verad exith born?"], 3)[0]]
    assert gold not in plain
    assert index.search(["Where was verad exith born? person"], 3)[0][0].id == gold


def test_search_data_writes_corpus_questions_and_index(tmp_path, capsys):
    assert main(["search-data", "--out", str(tmp_path), "--train", "12", "--heldout", "6", "--validation", "4"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["passages"] == len(knowledge_base().passages)
    train, heldout = read_problems(tmp_path / "train.parquet"), read_problems(tmp_path / "heldout.parquet")
    validation = read_problems(tmp_path / "validation.parquet")
    assert [p.uid for p in train] == [f"tiny-search-{i}" for i in range(12)]
    assert [p.uid for p in heldout] == [f"tiny-search-{i}" for i in range(HELDOUT_START, HELDOUT_START + 6)]
    assert [p.uid for p in validation] == [f"tiny-search-{i}" for i in range(VALIDATION_START, VALIDATION_START + 4)]
    assert len(BM25Index(tmp_path / "index")) == written["passages"]


def test_search_data_refuses_more_questions_than_a_range_holds(tmp_path, capsys):
    assert main(["search-data", "--out", str(tmp_path), "--train", str(VALIDATION_START + 1), "--heldout", "1"]) == 1
    assert "at most 500000 training" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
