"""Repeated queries answered from memory: a Retriever in front of another one.

A training step asks many equal queries (the episodes of a GRPO group share their question, and
their Searchers often search it as it is). `QueryCache.search` answers a (query, topk) it has
answered since the last `clear()` from memory and sends only the others, each once, to the
retriever behind it; a query that another thread is searching at the time waits for that
search. A failed call stores nothing and raises as the retriever raised (its waiters search
for themselves). The trainer
clears it at each step (the Searchers' tool, workflows/search_tool.py), so that it holds one
step's queries. Counted since the last clear:

    lookups = queries asked,  hits = queries not searched by their own call (answered from
    memory, waited for, or equal to one earlier in the same call),  hit rate = hits / lookups
"""

from __future__ import annotations

import threading

from verl_masopd.retrieval.passages import Passage, Retriever


class QueryCache:
    """A Retriever that remembers the answers of `retriever` until `clear()`; thread-safe. A query
    another thread is searching at the time is waited for, not searched again."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever
        self._answers: dict[tuple[str, int], list[Passage]] = {}
        self._pending: dict[tuple[str, int], threading.Event] = {}
        self._hits = self._lookups = 0
        self._lock = threading.Lock()

    def _fetch(self, queries: list[str], topk: int) -> dict[str, list[Passage]]:
        """Search `queries` (this thread owns them in `_pending`), keep and publish the answers."""
        found: dict[str, list[Passage]] = {}
        try:
            if queries:
                found = dict(zip(queries, self.retriever.search(queries, topk), strict=True))
        finally:  # a failed search keeps nothing; its waiters search for themselves
            with self._lock:
                self._answers.update(((q, topk), hits) for q, hits in found.items())
                for q in queries:
                    self._pending.pop((q, topk)).set()
        return found

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        queries = list(queries)
        answers: dict[str, list[Passage]] = {}
        mine, waits = [], {}
        with self._lock:
            for q in dict.fromkeys(queries):
                key = (q, topk)
                if key in self._answers:
                    answers[q] = self._answers[key]
                elif key in self._pending:
                    waits[q] = self._pending[key]
                else:
                    self._pending[key] = threading.Event()
                    mine.append(q)
        answers.update(self._fetch(mine, topk))
        searched = len(mine)
        for q, done in waits.items():
            key = (q, topk)
            while q not in answers:
                done.wait()
                with self._lock:
                    if key in self._answers:
                        answers[q] = self._answers[key]
                        break
                    if key in self._pending:
                        done = self._pending[key]
                        continue
                    self._pending[key] = threading.Event()
                answers[q] = self._fetch([q], topk)[q]
                searched += 1
        with self._lock:
            self._lookups += len(queries)
            self._hits += len(queries) - searched
        return [list(answers[q]) for q in queries]

    def stats(self) -> dict[str, float]:
        """lookups, hits and hit_rate (0 without lookups) since the last clear."""
        with self._lock:
            rate = self._hits / self._lookups if self._lookups else 0.0
            return {"lookups": self._lookups, "hits": self._hits, "hit_rate": rate}

    def clear(self) -> None:
        """Forget every answer and reset the counts (searches under way still publish theirs)."""
        with self._lock:
            self._answers.clear()
            self._hits = self._lookups = 0
