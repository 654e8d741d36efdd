"""The retrieval backends a search workflow can open, by name: where its passages come from.

A backend is a name, a predicate on the spec (the string the workflow is given, its
`workflow.options.retriever`), a constructor `(spec, timeout_s) -> Retriever` and a description
for error messages. `open_retriever(spec, timeout_s)` opens the spec with the first backend, in
registration order, whose predicate accepts it; a spec no backend accepts, or one its backend
cannot serve, raises a ValueError naming it. Built in:

- "server": an http(s) URL of a server for Search-R1's `POST /retrieve` API (the project's own
  server or a user's dense one); it must answer a one-query search at start-up.
- "bm25": a folder holding a BM25 index (`python -m verl_masopd.retrieval index`).

`register_retriever` adds another, from a file the run lists under `imports`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verl_masopd.retrieval.client import RetrievalError, SearchClient, check_reachable
from verl_masopd.retrieval.index import MANIFEST, BM25Index
from verl_masopd.retrieval.passages import Retriever


@dataclass(frozen=True)
class Backend:
    """One way to open a retriever: `accepts(spec)` says whether `spec` is this backend's, `construct(spec,
    timeout_s)` builds it (a ValueError with one line when it cannot serve)."""

    name: str
    accepts: Callable[[str], bool]
    construct: Callable[[str, float], Retriever]
    description: str


BACKENDS: dict[str, Backend] = {}


def register_retriever(
    name: str, accepts: Callable[[str], bool], construct: Callable[[str, float], Retriever], description: str
) -> Backend:
    """Make the backend `name` selectable by the specs `accepts` takes; an existing name is not replaced."""
    if name in BACKENDS:
        raise ValueError(f"retrieval backend {name!r} is already registered")
    BACKENDS[name] = backend = Backend(name, accepts, construct, description)
    return backend


def open_retriever(spec: str, timeout_s: float) -> Retriever:
    """The retriever of the first backend that accepts `spec` (module doc)."""
    known = "; ".join(backend.description for backend in BACKENDS.values())
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"give one of: {known}")
    for backend in BACKENDS.values():
        if backend.accepts(spec):
            return backend.construct(spec, timeout_s)
    raise ValueError(f"{spec} is none of: {known}")


def _is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def _open_server(url: str, timeout_s: float) -> SearchClient:
    try:
        check_reachable(url, timeout_s)
    except RetrievalError as error:
        raise ValueError(str(error)) from None
    return SearchClient(url, timeout_s=timeout_s)


def _is_index(spec: str) -> bool:
    return (Path(spec) / MANIFEST).is_file()


def _open_index(folder: str, timeout_s: float) -> BM25Index:
    return BM25Index(folder)


register_retriever("server", _is_url, _open_server, "an http(s) URL of a retrieval server")
register_retriever(
    "bm25",
    _is_index,
    _open_index,
    "a BM25 index folder (build one with: python -m verl_masopd.retrieval index --corpus FILE --out FOLDER)",
)
