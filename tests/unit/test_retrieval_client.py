"""The HTTP client against the project's own server (real HTTP on localhost), and the guard's
outcomes when the server is down, hangs, errs or answers out of layout, or a query is huge."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl_masopd.retrieval import (
    BM25Index,
    GuardedRetriever,
    RetrievalError,
    RetrievalServer,
    SearchClient,
    ServerError,
    ServerTimeout,
    ServerUnreachable,
    check_reachable,
)
from verl_masopd.retrieval.guard import FAILED, MAX_QUERY_CHARS, NO_MATCH


@pytest.fixture(scope="module")
def index(retrieval_index) -> BM25Index:
    return BM25Index(retrieval_index)


@pytest.fixture(scope="module")
def server(index):
    with RetrievalServer(index) as running:
        yield running


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + "/retrieve", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


class _Canned(ThreadingHTTPServer):
    """A broken retrieval server: every POST gets `status` and `body`; `requests` counts them."""

    def __init__(self, status: int, body: bytes):
        self.status, self.body, self.requests = status, body, 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server.requests += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.shutdown()
        self.server_close()


@pytest.fixture
def canned():
    made = []

    def make(status: int, body: bytes) -> _Canned:
        made.append(_Canned(status, body))
        return made[-1]

    yield make
    for server in made:
        server.close()


class _Silent:
    """A server that accepts connections and never answers; `accepted` counts them."""

    def __init__(self):
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.accepted, self._held = 0, []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(connection)

    def close(self):
        self._socket.close()
        for connection in self._held:
            connection.close()


def test_the_client_returns_what_the_index_finds(server, index, retrieval_queries):
    queries = [query for query, _ in retrieval_queries]
    found = SearchClient(server.url).search(queries, 2)
    assert found == index.search(queries, 2)
    assert [hits[0].id for hits in found] == [answer for _, answer in retrieval_queries]
    assert SearchClient(server.url + "/retrieve/").search(queries[:1], 1) == [found[0][:1]]


def test_the_environments_proxy_is_not_used(server, monkeypatch):
    dead = f"http://127.0.0.1:{_closed_port()}"
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert SearchClient(server.url, retries=0).search(["coral reef"], 1)[0][0].id == "3"


def test_the_server_speaks_both_search_r1_layouts(server, index):
    scored = _post(server.url, {"queries": ["coral reef", "Engine"], "topk": 1, "return_scores": True})
    [[reef]], [[engine]] = index.search(["coral reef"], 1), index.search(["Engine"], 1)
    assert scored == {
        "result": [
            [{"document": {"id": reef.id, "contents": reef.contents}, "score": reef.score}],
            [{"document": {"id": engine.id, "contents": engine.contents}, "score": engine.score}],
        ]
    }
    bare = _post(server.url, {"queries": ["English Engine mountain reef"]})
    assert len(bare["result"][0]) == 3 and all(set(doc) == {"id", "contents"} for doc in bare["result"][0])


def test_check_reachable_passes_a_live_server_and_names_a_dead_one(server):
    check_reachable(server.url)
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(RetrievalError) as error:
        check_reachable(url, timeout_s=2)
    message = str(error.value)
    assert message.startswith(f"retrieval server {url} is not usable: cannot connect") and "\n" not in message
    with pytest.raises(RetrievalError, match="^retrieval server localhost:8000 is not usable: .*not an http"):
        check_reachable("localhost:8000")


def test_found_and_empty_outcomes_are_counted(server):
    guard = GuardedRetriever(SearchClient(server.url), topk=2)
    ok, empty = guard.search(["highest mountain in Africa", "xylophone zeppelin"])
    assert (ok.outcome, [p.id for p in ok.passages][0]) == ("ok", "2")
    assert ok.observation.startswith("Doc 1(Title: Mount Kilimanjaro) Mount Kilimanjaro is")
    assert (empty.outcome, empty.observation, empty.passages) == ("empty", NO_MATCH, ())
    assert guard.counts() == {
        "ok": 1,
        "empty": 1,
        "query_too_long": 0,
        "timeout": 0,
        "unreachable": 0,
        "error": 0,
    }


def test_a_huge_query_is_cut_and_recorded(server):
    guard = GuardedRetriever(SearchClient(server.url), topk=1)
    huge = "coral reef of Queensland " + "word " * 20_000
    assert len(huge) > 100_000
    [outcome] = guard.search([huge])
    assert outcome.outcome == "query_too_long" and len(outcome.query) == MAX_QUERY_CHARS
    assert [p.id for p in outcome.passages] == ["3"]
    assert guard.counts()["query_too_long"] == 1


def test_a_server_that_is_down_is_unreachable():
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ServerUnreachable):
        SearchClient(url, retries=1, backoff_s=0.01).search(["reef"], 3)
    guard = GuardedRetriever(SearchClient(url, retries=1, backoff_s=0.01))
    outcomes = guard.search(["reef", "mountain"])
    assert [o.outcome for o in outcomes] == ["unreachable", "unreachable"]
    assert outcomes[0].observation == FAILED["unreachable"] and "Connection refused" in outcomes[0].detail
    assert guard.counts()["unreachable"] == 2


def test_a_server_that_hangs_times_out_after_bounded_retries():
    silent = _Silent()
    try:
        client = SearchClient(silent.url, timeout_s=0.3, retries=1, backoff_s=0.01)
        with pytest.raises(ServerTimeout, match="no answer within 0.3 s"):
            client.search(["reef"], 3)
        assert silent.accepted == 2
        [outcome] = GuardedRetriever(client).search(["reef"])
        assert (outcome.outcome, outcome.observation) == ("timeout", FAILED["timeout"])
        assert silent.accepted == 4
    finally:
        silent.close()


def test_a_server_error_is_retried_and_a_client_error_is_not(canned):
    failing = canned(500, b"Internal Server Error")
    with pytest.raises(ServerError, match="HTTP 500") as error:
        SearchClient(failing.url, retries=2, backoff_s=0.01).search(["reef"], 3)
    assert (error.value.status, failing.requests) == (500, 3)
    refusing = canned(422, b'{"detail": "bad"}')
    [outcome] = GuardedRetriever(SearchClient(refusing.url, retries=2, backoff_s=0.01)).search(["reef"])
    assert (outcome.outcome, refusing.requests) == ("error", 1)
    assert outcome.observation == FAILED["error"] and "HTTP 422" in outcome.detail


@pytest.mark.parametrize(
    "body, detail",
    [
        (b"<html>not json</html>", "not JSON"),
        (b'{"result": "none"}', "no 'result' list"),
        (b'{"result": [[], []]}', "2 result lists for 1 queries"),
        (b"", "not JSON"),
    ],
)
def test_a_malformed_answer_is_an_error_outcome(canned, body, detail):
    server = canned(200, body)
    guard = GuardedRetriever(SearchClient(server.url, retries=2, backoff_s=0.01))
    [outcome] = guard.search(["reef"])
    assert outcome.outcome == "error" and detail in outcome.detail
    assert server.requests == 1 and guard.counts()["error"] == 1


def test_an_empty_result_from_a_remote_server_is_empty(canned):
    server = canned(200, b'{"result": [[]]}')
    [outcome] = GuardedRetriever(SearchClient(server.url)).search(["reef"])
    assert (outcome.outcome, outcome.observation) == ("empty", NO_MATCH)
