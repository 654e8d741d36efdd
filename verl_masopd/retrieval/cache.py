"""Repeated queries answered from memory: a Retriever in front of another one.

A training step asks many equal queries (the episodes of a GRPO group share their question, and
their Searchers often search it as it is). `QueryCache.search` answers a (query, topk) it has
answered since the last `clear()` from memory and sends only the others, each once, to the
retriever behind it; a failed call stores nothing and raises as the retriever raised. The trainer
clears it at each step (the Searchers' tool, workflows/search_tool.py), so that it holds one
step's queries. Counted since the last clear:

    lookups = queries asked,  hits = queries answered from memory (an equal query earlier in the
    same call included),  hit rate = hits / lookups
"""

from __future__ import annotations

import threading

from verl_masopd.retrieval.passages import Passage, Retriever


class QueryCache:
    """A Retriever that remembers the answers of `retriever` until `clear()`; thread-safe."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever
        self._answers: dict[tuple[str, int], list[Passage]] = {}
        self._hits = self._lookups = 0
        self._lock = threading.Lock()

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        queries = list(queries)
        with self._lock:
            known = {q: self._answers[(q, topk)] for q in queries if (q, topk) in self._answers}
        missing = list(dict.fromkeys(q for q in queries if q not in known))
        found = dict(zip(missing, self.retriever.search(missing, topk), strict=True)) if missing else {}
        with self._lock:
            self._answers.update(((q, topk), hits) for q, hits in found.items())
            self._lookups += len(queries)
            self._hits += len(queries) - len(missing)
        return [list(known[q]) if q in known else list(found[q]) for q in queries]

    def stats(self) -> dict[str, float]:
        """lookups, hits and hit_rate (0 without lookups) since the last clear."""
        with self._lock:
            rate = self._hits / self._lookups if self._lookups else 0.0
            return {"lookups": self._lookups, "hits": self._hits, "hit_rate": rate}

    def clear(self) -> None:
        """Forget every answer and reset the counts."""
        with self._lock:
            self._answers.clear()
            self._hits = self._lookups = 0
