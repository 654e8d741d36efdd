"""The retrieval server as users start it: `python -m verl_masopd.retrieval serve` in its own
process, and inside a Ray actor on a local Ray; rollout workers reach both over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from verl_masopd.retrieval import BM25Index, SearchClient, check_reachable, start_ray_server

pytestmark = pytest.mark.integration


def test_the_serve_command_answers_until_terminated(retrieval_index, retrieval_queries):
    queries = [query for query, _ in retrieval_queries]
    process = subprocess.Popen(
        [sys.executable, "-m", "verl_masopd.retrieval", "serve", "--index", str(retrieval_index), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read()
        check_reachable(url, timeout_s=30)
        assert SearchClient(url).search(queries, 3) == BM25Index(retrieval_index).search(queries, 3)
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)


def test_the_ray_actor_serves_the_index(ray_local, retrieval_index, retrieval_queries):
    actor, url = start_ray_server(str(retrieval_index))
    try:
        check_reachable(url, timeout_s=30)
        found = SearchClient(url).search([query for query, _ in retrieval_queries], 1)
        assert [hits[0].id for hits in found] == [answer for _, answer in retrieval_queries]
    finally:
        ray_local.kill(actor)
