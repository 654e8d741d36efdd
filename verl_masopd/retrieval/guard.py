"""Searches that never raise: every query comes back as an observation text and an outcome label,
and the labels are counted.

Outcomes: "ok" (passages found), "empty" (none matched), "query_too_long" (the query was cut to
`max_query_chars` and searched; its passages are in the observation), and, for every query of a
call that failed, "timeout", "unreachable" or "error" (an HTTP error, a malformed answer, any
other exception of the retriever).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from verl_masopd.retrieval.client import ServerTimeout, ServerUnreachable
from verl_masopd.retrieval.passages import Passage, Retriever, render_observation

OK, EMPTY, QUERY_TOO_LONG, TIMEOUT, UNREACHABLE, ERROR = (
    "ok",
    "empty",
    "query_too_long",
    "timeout",
    "unreachable",
    "error",
)
OUTCOMES = (OK, EMPTY, QUERY_TOO_LONG, TIMEOUT, UNREACHABLE, ERROR)
# Search-R1's e5 server encodes at most 256 tokens of a query, about 1,000 characters of English.
MAX_QUERY_CHARS = 1024
NO_MATCH = "No passage matched the query.\n"
FAILED = {
    TIMEOUT: "Search failed: the retrieval server did not answer in time.\n",
    UNREACHABLE: "Search failed: the retrieval server could not be reached.\n",
    ERROR: "Search failed: the retrieval server returned an error.\n",
}


@dataclass(frozen=True)
class SearchOutcome:
    """One query's result. `query` is the text searched (cut to the cap); `detail` says what
    failed, "" otherwise."""

    query: str
    outcome: str
    observation: str
    passages: tuple[Passage, ...] = ()
    detail: str = ""


class GuardedRetriever:
    """A Retriever whose `search` returns one SearchOutcome per query and never raises; safe to
    share between threads."""

    def __init__(self, retriever: Retriever, topk: int = 3, max_query_chars: int = MAX_QUERY_CHARS):
        if topk < 1:
            raise ValueError(f"topk must be at least 1, got {topk}")
        if max_query_chars < 1:
            raise ValueError(f"max_query_chars must be at least 1, got {max_query_chars}")
        self.retriever = retriever
        self.topk = topk
        self.max_query_chars = max_query_chars
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _outcome(self, original: str, query: str, passages: list[Passage]) -> SearchOutcome:
        hits = tuple(passages[: self.topk])
        if len(original) > self.max_query_chars:
            label = QUERY_TOO_LONG
        else:
            label = OK if hits else EMPTY
        return SearchOutcome(query, label, render_observation(list(hits)) if hits else NO_MATCH, hits)

    def search(self, queries: list[str]) -> list[SearchOutcome]:
        capped = [query[: self.max_query_chars] for query in queries]
        try:
            found = self.retriever.search(capped, self.topk)
            if len(found) != len(capped):
                raise ValueError(f"{len(found)} result lists for {len(capped)} queries")
            outcomes = [self._outcome(*row) for row in zip(queries, capped, found)]
        except Exception as error:  # any failure of the retriever is an outcome, never an exception
            if isinstance(error, ServerTimeout):
                label = TIMEOUT
            elif isinstance(error, ServerUnreachable):
                label = UNREACHABLE
            else:
                label = ERROR
            detail = f"{type(error).__name__}: {error}"
            outcomes = [SearchOutcome(query, label, FAILED[label], detail=detail) for query in capped]
        with self._lock:
            self._counts.update(outcome.outcome for outcome in outcomes)
        return outcomes

    def counts(self) -> dict[str, int]:
        """How many queries ended in each outcome so far (every label, zeros included)."""
        with self._lock:
            return {label: self._counts[label] for label in OUTCOMES}
