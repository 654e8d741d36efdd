"""The project's retrieval server: the API of `api.py` over any Retriever (a local BM25Index),
served by uvicorn. One server answers every rollout worker; on a cluster it runs inside a Ray
actor (`start_ray_server`).

The listening socket is bound when a RetrievalServer is made, so its URL is known (and clients
may connect) before the server starts answering; port 0 picks a free port.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from verl_masopd.retrieval.api import RETRIEVE_PATH, response_body
from verl_masopd.retrieval.index import BM25Index
from verl_masopd.retrieval.passages import Retriever

DEFAULT_TOPK = 3


class QueryRequest(BaseModel):
    queries: list[str]
    topk: int | None = Field(default=None, ge=1)
    return_scores: bool = False


def create_app(retriever: Retriever, default_topk: int = DEFAULT_TOPK) -> FastAPI:
    """The FastAPI app answering `POST /retrieve`; a request without `topk` gets `default_topk`."""
    app = FastAPI(title="verl-masopd retrieval")

    @app.post(RETRIEVE_PATH)
    def retrieve(request: QueryRequest) -> JSONResponse:
        results = retriever.search(request.queries, request.topk or default_topk)
        return JSONResponse(response_body(results, request.return_scores))

    return app


def advertised_host(host: str) -> str:
    """The host name clients use for a server bound to `host` (this machine's address for the
    wildcard addresses)."""
    return socket.gethostbyname(socket.gethostname()) if host in ("", "0.0.0.0") else host


class RetrievalServer:
    """uvicorn serving `create_app(retriever)` on (host, port): `run` in the foreground, or
    `start` / `stop` (or `with`) on a background thread."""

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0, default_topk: int = DEFAULT_TOPK):
        self._socket = socket.create_server((host, port))
        self.host = host
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(create_app(retriever, default_topk), log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{advertised_host(self.host)}:{self.port}"

    def run(self) -> None:
        """Serve until interrupted (SIGINT / SIGTERM)."""
        self._server.run(sockets=[self._socket])

    def start(self, timeout_s: float = 30.0) -> RetrievalServer:
        """Serve on a daemon thread; returns once the server answers, raises RuntimeError if it
        has not started within `timeout_s`."""
        self._thread = threading.Thread(target=self.run, name="retrieval-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the retrieval server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self._socket.close()

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class RetrievalActor:
    """The body of the Ray actor: loads the index in `index_dir` (a path the actor's node can
    read) and serves it on every interface of its node."""

    def __init__(self, index_dir: str, port: int = 0, default_topk: int = DEFAULT_TOPK):
        import ray

        self._server = RetrievalServer(BM25Index(index_dir), host="0.0.0.0", port=port, default_topk=default_topk)
        self._server.start()
        self._url = f"http://{ray.util.get_node_ip_address()}:{self._server.port}"

    def url(self) -> str:
        return self._url


def start_ray_server(index_dir: str, port: int = 0, default_topk: int = DEFAULT_TOPK, num_cpus: float = 1, **options):
    """Start the retrieval server in a Ray actor of the running Ray cluster; returns (actor
    handle, URL). `options` go to the actor's `.options()` (a name, a scheduling strategy, ...);
    the server lives as long as the actor (`ray.kill(handle)` ends it)."""
    import ray

    actor = ray.remote(RetrievalActor).options(num_cpus=num_cpus, **options).remote(str(index_dir), port, default_topk)
    return actor, ray.get(actor.url.remote())
