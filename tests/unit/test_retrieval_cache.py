"""The query cache (retrieval/cache.py) in front of a real BM25 index and a real client: the same
answers as the retriever, equal queries searched once, counts and clearing, failures not kept."""

from __future__ import annotations

import threading

import pytest

from verl_masopd.retrieval import BM25Index, SearchClient, ServerUnreachable
from verl_masopd.retrieval.cache import QueryCache


def test_answers_are_the_retrievers_and_equal_queries_are_searched_once(retrieval_index, retrieval_queries):
    index = BM25Index(retrieval_index)
    cache = QueryCache(index)
    queries = [query for query, _ in retrieval_queries]
    assert cache.search(queries, 3) == index.search(queries, 3)
    assert cache.stats() == {"lookups": len(queries), "hits": 0, "hit_rate": 0.0}
    # a query met before, and one repeated inside the call: both from memory
    again = [queries[0], "Marie Curie radioactivity", "Marie Curie radioactivity"]
    assert cache.search(again, 3) == index.search(again, 3)
    assert cache.stats() == {"lookups": len(queries) + 3, "hits": 2, "hit_rate": pytest.approx(2 / (len(queries) + 3))}
    # topk is part of the key
    assert cache.search([queries[0]], 1) == index.search([queries[0]], 1)
    assert cache.stats()["hits"] == 2
    cache.clear()
    assert cache.stats() == {"lookups": 0, "hits": 0, "hit_rate": 0.0}
    cache.search([queries[0]], 3)
    assert cache.stats()["hits"] == 0


def test_threads_asking_the_same_query_at_once_search_it_once(retrieval_index):
    index = BM25Index(retrieval_index)
    cache = QueryCache(index)
    start = threading.Barrier(8)
    found = []

    def ask():
        start.wait()
        found.append(cache.search(["English Engine mountain reef"], 3))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [index.search(["English Engine mountain reef"], 3)] * 8
    assert cache.stats() == {"lookups": 8, "hits": 7, "hit_rate": 7 / 8}


def test_a_failed_search_raises_and_keeps_nothing():
    cache = QueryCache(SearchClient("http://127.0.0.1:9", timeout_s=0.5, retries=0))
    for _ in range(2):
        with pytest.raises(ServerUnreachable):
            cache.search(["who founded Carnegie Steel"], 3)
    assert cache.stats() == {"lookups": 0, "hits": 0, "hit_rate": 0.0}
