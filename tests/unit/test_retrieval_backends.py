"""The registry of retrieval backends (retrieval/backends.py): the built-in server URL and BM25 index
folder, a backend registered from outside the package that the search workflow then opens by its
spec, and every spec no backend serves named in one line."""

from __future__ import annotations

import pytest

from verl_masopd.retrieval import backends
from verl_masopd.retrieval.backends import open_retriever, register_retriever
from verl_masopd.retrieval.index import BM25Index
from verl_masopd.retrieval.passages import Passage
from verl_masopd.workflows import make_workflow


class Glossary:
    """A retriever over a fixed {term: definition} list: the definitions whose term is a word of the
    query, in list order."""

    def __init__(self, spec: str, timeout_s: float):
        self.entries = [entry.split("=", 1) for entry in spec.removeprefix("glossary:").split(",")]
        self.timeout_s = timeout_s

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        return [
            [
                Passage(str(n), f"{term}\n{text}")
                for n, (term, text) in enumerate(self.entries)
                if term in query.split()
            ][:topk]
            for query in queries
        ]


@pytest.fixture
def registry(monkeypatch):
    """The built-in backends, with registrations undone after the test."""
    monkeypatch.setattr(backends, "BACKENDS", dict(backends.BACKENDS))
    return backends.BACKENDS


def test_built_in_backends_open_an_index_folder_and_refuse_a_dead_server(toy_search_index):
    assert list(backends.BACKENDS) == ["server", "bm25"]
    index = open_retriever(toy_search_index, 5.0)
    assert isinstance(index, BM25Index)
    assert index.search(["Arland capital"], 1)[0][0].id == "0"
    with pytest.raises(ValueError, match=r"^retrieval server http://127.0.0.1:9 is not usable"):
        open_retriever("http://127.0.0.1:9", 1.0)


def test_a_spec_no_backend_accepts_names_every_backend(tmp_path):
    with pytest.raises(ValueError) as error:
        open_retriever(str(tmp_path), 5.0)
    assert str(error.value) == (
        f"{tmp_path} is none of: an http(s) URL of a retrieval server; a BM25 index folder "
        "(build one with: python -m verl_masopd.retrieval index --corpus FILE --out FOLDER)"
    )
    with pytest.raises(ValueError, match=r"^give one of: an http\(s\) URL"):
        open_retriever("", 5.0)


def test_a_registered_backend_serves_the_search_workflow(registry):
    register_retriever("glossary", lambda spec: spec.startswith("glossary:"), Glossary, "glossary:TERM=TEXT,...")
    assert list(registry) == ["server", "bm25", "glossary"]
    spec = "glossary:Bex=capital of Arland,Tol=river of Bex"
    workflow = make_workflow("search", "qa", 1, 8, retriever=spec, search_timeout_s=7.0)
    assert workflow.search_tool.cache.retriever.timeout_s == 7.0
    [found] = workflow.search_tool.retriever.search(["Tol and Bex"])
    assert (found.outcome, found.observation) == (
        "ok",
        "Doc 1(Title: Bex) capital of Arland\nDoc 2(Title: Tol) river of Bex\n",
    )
    with pytest.raises(
        ValueError, match=r"^workflow.options.retriever: nope is none of: .*; glossary:TERM=TEXT,\.\.\.$"
    ):
        make_workflow("search", "qa", 1, 8, retriever="nope")
    with pytest.raises(ValueError, match="retrieval backend 'glossary' is already registered"):
        register_retriever("glossary", bool, Glossary, "again")
