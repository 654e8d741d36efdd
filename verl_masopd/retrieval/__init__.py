"""Retrieval for search agents: a BM25 index over a passage corpus (bm25s, memory-mapped), a client
for Search-R1's retrieval HTTP API, the project's own server for that API, and a guard that turns
every failed search into a recorded outcome (docs/retrieval.md). `open_retriever` opens one by the
registry of backends (backends.py), which `register_retriever` extends."""

from verl_masopd.retrieval.backends import BACKENDS, Backend, open_retriever, register_retriever
from verl_masopd.retrieval.client import (
    RetrievalError,
    SearchClient,
    ServerError,
    ServerTimeout,
    ServerUnreachable,
    check_reachable,
)
from verl_masopd.retrieval.corpus import CorpusError
from verl_masopd.retrieval.guard import OUTCOMES, GuardedRetriever, SearchOutcome
from verl_masopd.retrieval.index import BM25Index, NotAnIndex, build_index
from verl_masopd.retrieval.passages import Passage, Retriever, render_observation
from verl_masopd.retrieval.server import RetrievalServer, start_ray_server

__all__ = [
    "BACKENDS",
    "OUTCOMES",
    "BM25Index",
    "Backend",
    "CorpusError",
    "GuardedRetriever",
    "NotAnIndex",
    "Passage",
    "RetrievalError",
    "RetrievalServer",
    "Retriever",
    "SearchClient",
    "SearchOutcome",
    "ServerError",
    "ServerTimeout",
    "ServerUnreachable",
    "build_index",
    "check_reachable",
    "open_retriever",
    "register_retriever",
    "render_observation",
    "start_ray_server",
]
