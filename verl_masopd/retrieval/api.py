"""The JSON of the retrieval HTTP API, as Search-R1's retrieval server speaks it.

Request, `POST {url}/retrieve`: `{"queries": [...], "topk": 3, "return_scores": true}`.
Response: `{"result": [one list per query]}`, each list best first; an entry is
`{"document": {"id": ..., "contents": ...}, "score": ...}` when scores were asked for, the bare
document otherwise. Servers may put more fields in a document (Search-R1's BM25 server sends
`title` and `text` and no `id`); only `contents` is required.
"""

from __future__ import annotations

import math

from verl_masopd.retrieval.passages import Passage

RETRIEVE_PATH = "/retrieve"


class BadResponse(ValueError):
    """A response body that is not in the API's layout."""


def request_body(queries: list[str], topk: int) -> dict:
    return {"queries": list(queries), "topk": topk, "return_scores": True}


def document(passage: Passage) -> dict:
    return {"id": passage.id, "contents": passage.contents}


def response_body(results: list[list[Passage]], return_scores: bool = True) -> dict:
    """The response for `results` (one list of passages per query)."""
    if return_scores:
        return {"result": [[{"document": document(p), "score": p.score} for p in hits] for hits in results]}
    return {"result": [[document(p) for p in hits] for hits in results]}


def _passage(entry: object, where: str) -> Passage:
    score = None
    if isinstance(entry, dict) and "document" in entry:
        score = entry.get("score")
        if score is not None and (
            isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)
        ):
            raise BadResponse(f"{where}: score is not a finite number: {score!r}")
        entry = entry["document"]
    if not isinstance(entry, dict) or not isinstance(entry.get("contents"), str):
        raise BadResponse(f"{where}: not a document with a 'contents' string")
    score = None if score is None else float(score)
    return Passage(id=str(entry.get("id", "")), contents=entry["contents"], score=score)


def parse_response(body: object, queries: int) -> list[list[Passage]]:
    """The passages of a decoded response body to a request of `queries` queries; raises
    BadResponse when the body is not in the API's layout."""
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list):
        raise BadResponse("no 'result' list in the response")
    if len(result) != queries:
        raise BadResponse(f"{len(result)} result lists for {queries} queries")
    parsed = []
    for number, hits in enumerate(result):
        if not isinstance(hits, list):
            raise BadResponse(f"result[{number}] is not a list")
        parsed.append([_passage(entry, f"result[{number}][{rank}]") for rank, entry in enumerate(hits)])
    return parsed
