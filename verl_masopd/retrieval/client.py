"""A client for the retrieval HTTP API (`api.py`): Search-R1's retrieval server, dense e5 or BM25,
or this project's own (`server.py`).

Each call has a timeout (connect, and each wait for the server's bytes) and is retried a bounded
number of times, with a doubling pause, when the server cannot be reached, times out or answers
5xx / 429. A response that is not the API's JSON is not retried. Proxy settings of the
environment (http_proxy, ...) are not used: retrieval servers are on the cluster's own network.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from verl_masopd.retrieval.api import RETRIEVE_PATH, BadResponse, parse_response, request_body
from verl_masopd.retrieval.passages import Passage

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class RetrievalError(RuntimeError):
    """A search that the server did not answer with passages."""


class ServerUnreachable(RetrievalError):
    """No connection to the server (refused, unknown host, reset before an answer)."""


class ServerTimeout(RetrievalError):
    """The server did not answer within the timeout."""


class ServerError(RetrievalError):
    """An HTTP error status (`status`), or a body that is not the API's JSON (`status` None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def retrieve_url(url: str) -> str:
    """The endpoint for a server's base URL; a URL that already ends in /retrieve is kept."""
    url = url.rstrip("/")
    return url if url.endswith(RETRIEVE_PATH) else url + RETRIEVE_PATH


class SearchClient:
    """The Retriever interface over HTTP; error messages leave out the URL (`self.url`)."""

    def __init__(self, url: str, timeout_s: float = 30.0, retries: int = 2, backoff_s: float = 0.5):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url}: not an http(s) URL")
        self.url = retrieve_url(url)
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _post(self, body: bytes) -> object:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise ServerError(f"HTTP {error.code} {error.reason}", status=error.code) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, (TimeoutError, socket.timeout)):
                raise ServerTimeout(f"no answer within {self.timeout_s:g} s") from None
            raise ServerUnreachable(f"cannot connect: {error.reason}") from None
        except (TimeoutError, socket.timeout):
            raise ServerTimeout(f"no answer within {self.timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException) as error:
            raise ServerUnreachable(f"connection lost: {error!r}") from None
        try:
            return json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ServerError(f"the response is not JSON ({error})") from None

    @staticmethod
    def _retryable(error: RetrievalError) -> bool:
        if isinstance(error, ServerError):
            return error.status in RETRYABLE_STATUS
        return isinstance(error, (ServerUnreachable, ServerTimeout))

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The passages of each query; raises ServerUnreachable, ServerTimeout or ServerError
        once the retries are spent."""
        body = json.dumps(request_body(queries, topk)).encode("utf-8")
        for attempt in range(self.retries + 1):
            try:
                decoded = self._post(body)
                break
            except RetrievalError as error:
                if attempt == self.retries or not self._retryable(error):
                    raise
            time.sleep(self.backoff_s * 2**attempt)
        try:
            return parse_response(decoded, len(queries))
        except BadResponse as error:
            raise ServerError(f"the response is not in the API's layout: {error}") from None


def check_reachable(url: str, timeout_s: float = 10.0) -> None:
    """Raise RetrievalError with one line naming `url` unless the server there answers a
    one-query search in the API's layout."""
    try:
        SearchClient(url, timeout_s=timeout_s, retries=0).search(["retrieval server check"], 1)
    except (RetrievalError, ValueError) as error:
        raise RetrievalError(f"retrieval server {url} is not usable: {error}") from None
