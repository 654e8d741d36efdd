"""The BM25 index: ranking, the digest-keyed reuse of a built folder, memory-mapped loading, bad
corpora named by file and line, and the real 1,000-passage wiki-18 sample in ../shared/data."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from verl_masopd.retrieval import BM25Index, CorpusError, NotAnIndex, build_index, render_observation

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "wiki18_corpus" / "sample_data.jsonl"
needs_sample = pytest.mark.skipif(not SAMPLE.is_file(), reason=f"wiki-18 sample not found at {SAMPLE}")


def test_the_passage_that_answers_a_query_ranks_first(retrieval_index, retrieval_queries):
    index = BM25Index(retrieval_index)
    assert len(index) == 6
    results = index.search([query for query, _ in retrieval_queries], topk=3)
    assert [hits[0].id for hits in results] == [answer for _, answer in retrieval_queries]
    for hits in results:
        assert 1 <= len(hits) <= 3
        scores = [p.score for p in hits]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_passages_keep_ids_and_contents(retrieval_index, retrieval_corpus):
    rows = [json.loads(line) for line in retrieval_corpus.read_text().splitlines()]
    [[hit]] = BM25Index(retrieval_index).search(["Marie Curie radioactivity"], topk=1)
    assert (hit.id, hit.contents) == ("5", rows[5]["contents"])
    assert (hit.title, hit.text.split()[:2]) == ("Marie Curie", ["Marie", "Curie"])


def test_queries_sharing_no_term_with_the_corpus_find_nothing(retrieval_index):
    assert BM25Index(retrieval_index).search(["", "the of and is", "xylophone zeppelin"], topk=3) == [[], [], []]


def test_topk_above_the_corpus_size_returns_every_match(retrieval_index):
    [hits] = BM25Index(retrieval_index).search(["English Engine mountain reef"], topk=50)
    assert sorted(p.id for p in hits) == ["0", "2", "3", "4"]
    with pytest.raises(ValueError, match="topk"):
        BM25Index(retrieval_index).search(["reef"], topk=0)


def test_the_index_is_loaded_memory_mapped(retrieval_index):
    index = BM25Index(retrieval_index)
    assert all(isinstance(index._bm25.scores[name], np.memmap) for name in ("data", "indices", "indptr"))


def test_searches_from_many_threads_agree(retrieval_index, retrieval_queries):
    index = BM25Index(retrieval_index)
    queries = [query for query, _ in retrieval_queries]
    expected = index.search(queries, topk=2)
    seen = []

    def work():
        seen.extend(index.search(queries, topk=2) == expected for _ in range(20))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [True] * 80


def test_a_second_build_of_the_same_corpus_is_a_load(retrieval_corpus, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(retrieval_corpus.read_bytes())
    out = tmp_path / "index"
    assert build_index(corpus, out) is True
    stamps = {path: path.stat().st_mtime_ns for path in out.rglob("*")}
    assert build_index(corpus, out) is False
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*")} == stamps
    manifest = json.loads((out / "index.json").read_text())
    assert manifest["passages"] == 6 and len(manifest["corpus_sha256"]) == 64

    with corpus.open("a") as handle:
        handle.write(json.dumps({"id": "6", "contents": '"Zeppelin"\nA zeppelin is a rigid airship.'}) + "\n")
    assert build_index(corpus, out) is True
    index = BM25Index(out)
    assert len(index) == 7 and index.search(["airship"], topk=1)[0][0].id == "6"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "index"]


def test_a_folder_that_is_not_an_index_is_not_overwritten(retrieval_corpus, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(NotAnIndex, match="not overwritten") as error:
        build_index(retrieval_corpus, tmp_path)
    assert str(tmp_path) in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"not json at all", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": "1", "text": "no contents"}', 'no "contents" string'),
        (b'{"id": "1", "contents": 7}', 'no "contents" string'),
        (b'{"contents": "Title\\nno id"}', 'no "id"'),
        (b'{"id": "1", "contents": "caf\xe9"}', "not UTF-8 text"),
    ],
)
def test_a_bad_corpus_line_is_named_by_file_and_line(tmp_path, line, reason):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"id": "0", "contents": "A\\nfine passage"}\n\n' + line + b"\n")
    with pytest.raises(CorpusError) as error:
        build_index(corpus, tmp_path / "index")
    assert str(error.value).startswith(f"{corpus}:3: {reason}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


def test_an_empty_or_missing_corpus_is_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(CorpusError, match=f"^{empty}: no passages$"):
        build_index(empty, tmp_path / "index")
    with pytest.raises(CorpusError, match=f"^{tmp_path / 'missing.jsonl'}: cannot read the corpus"):
        build_index(tmp_path / "missing.jsonl", tmp_path / "index")


def test_a_folder_that_is_not_an_index_is_refused_by_name(retrieval_index, tmp_path):
    with pytest.raises(NotAnIndex, match=f"^{tmp_path}: not a retrieval index"):
        BM25Index(tmp_path)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(NotAnIndex, match=f"^{tmp_path}: not a retrieval index"):
        BM25Index(tmp_path)
    (tmp_path / "index.json").write_text((retrieval_index / "index.json").read_text())
    with pytest.raises(NotAnIndex, match="missing passages.jsonl"):
        BM25Index(tmp_path)


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory) -> BM25Index:
    out = tmp_path_factory.mktemp("wiki18") / "index"
    build_index(SAMPLE, out)
    return BM25Index(out)


@needs_sample
def test_the_wiki18_sample_ranks_the_right_passage_first(sample_index):
    assert len(sample_index) == 1000
    results = sample_index.search(
        [
            "Evan Morris lobbyist for Genentech and Roche",
            "Horatio Hale ethnologist of the Wilkes exploring expedition",
            "Andrew Carnegie steel",
        ],
        topk=3,
    )
    assert [hits[0].id for hits in results[:2]] == ["0", "1"]
    assert all(p.title == "Andrew Carnegie" for p in results[2])
    observation = render_observation(results[0])
    assert observation.startswith("Doc 1(Title: Evan Morris) Evan Morris Evan L. Morris (January 26, 1977")
    assert [line[:6] for line in observation.splitlines()] == ["Doc 1(", "Doc 2(", "Doc 3("]


@needs_sample
def test_the_wiki18_sample_titles_parse_with_and_without_quotes(sample_index):
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    bare = [row for row in rows if not row["contents"].startswith('"')]
    assert len(bare) == 121
    passages = [sample_index.passage(i) for i in range(len(sample_index))]
    assert [p.id for p in passages] == [row["id"] for row in rows]
    assert [p.contents for p in passages] == [row["contents"] for row in rows]
    assert all(p.title and not p.title.startswith('"') and not p.title.endswith('"') for p in passages)
    assert {p.title for p in passages if p.id == bare[0]["id"]} == {bare[0]["contents"].split("\n")[0]}
