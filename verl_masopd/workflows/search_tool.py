"""The Searchers' search engine as a tool inside their replies, in Search-R1's conventions.

A Searcher writes a query as `<search>query</search>`; its generation stops at "</search>", the
query (the text after the last "<search>" of the reply) goes to the retriever, and the top-k
passages come back appended to the reply as

    \\n\\n<information>Doc 1(Title: t) text\\nDoc 2(Title: t) text\\n…</information>\\n\\n

(cut to the tool's `max_observation_tokens` by the rollout). Every search ends in an outcome
label, recorded with the call: the retrieval guard's ("ok", "empty", "query_too_long",
"timeout", "unreachable", "error"), or "no_query" when the call has no opening tag.

Equal queries within a training step are searched once: the tool's `cache` (retrieval/cache.py),
cleared by `begin_step`, its lookups, hits and hit rate the tool's step metrics
(rollout/tool/search/cache_*).

The workflow opens the tool's retriever from `workflow.options.retriever` through the registry of
retrieval backends (retrieval/backends.py: a server URL or a BM25 index folder, unless one is added).
"""

from __future__ import annotations

from verl_masopd.retrieval import GuardedRetriever, Retriever
from verl_masopd.retrieval.cache import QueryCache
from verl_masopd.workflows.tools import Observation, Tool

NO_QUERY = "no_query"


class SearchTool(Tool):
    """`<search>` calls answered with `<information>` observations (module doc)."""

    name = "search"

    def __init__(
        self,
        retriever: Retriever,
        topk: int = 3,
        search_tag: str = "search",
        information_tag: str = "information",
        max_calls: int = 3,
        max_observation_tokens: int = 500,
        timeout_s: float = 60.0,
    ):
        self.stop = (f"</{search_tag}>",)
        super().__init__(max_calls, max_observation_tokens, timeout_s)
        self.cache = QueryCache(retriever)
        self.retriever = GuardedRetriever(self.cache, topk)
        self.opening, self.closing = f"<{search_tag}>", f"</{search_tag}>"
        self.information_tag = information_tag

    def query(self, reply: str) -> str | None:
        """The query of the call that ends `reply`: the text between its last opening tag and the
        closing tag after it; None without an opening tag."""
        end = reply.rfind(self.closing)
        head = reply[:end] if end >= 0 else reply
        start = head.rfind(self.opening)
        return None if start < 0 else head[start + len(self.opening) :].strip()

    def run(self, reply: str) -> Observation:
        tag = self.information_tag
        query = self.query(reply)
        if query is None:
            return Observation(
                f"\n\n<{tag}>No query: write it as {self.opening}query{self.closing}.</{tag}>\n\n", NO_QUERY
            )
        [found] = self.retriever.search([query])
        return Observation(f"\n\n<{tag}>{found.observation}</{tag}>\n\n", found.outcome)

    def begin_step(self) -> None:
        self.cache.clear()

    def step_metrics(self) -> dict[str, float]:
        return {f"cache_{key}": value for key, value in self.cache.stats().items()}
