"""Engines on a Ray cluster of small nodes: spread over the nodes instead of waiting forever for
one bundle that no node can hold, and a request the cluster cannot grant refused within the wait.
Run in a process of its own (multinode_placement_run.py): the cluster is a Ray of its own."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

RUN = Path(__file__).parent / "multinode_placement_run.py"


def test_engines_span_two_one_cpu_nodes_and_an_ungranted_request_stops_in_time(tiny_model_path):
    # Ray's socket paths must stay under 108 bytes: a short private folder, not pytest's tmp_path
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {**os.environ, "VERL_PLATFORM": "cpu", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(RUN), tiny_model_path], env=env, capture_output=True, text=True, timeout=240
    )
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert len(set(result["nodes"])) == 2, result["nodes"]
    first, second = result["log_prob_sums"]
    assert first < 0 and abs(first - second) < 1e-4

    refused = result["refused"]
    assert refused is not None and "\n" not in refused
    assert refused.startswith("engines.placement: the engines' placement groups (STRICT_PACK: [{'CPU': 1}])")
    assert "not granted within 3 s (engines.placement_wait_s)" in refused
    assert "[{'CPU': 1.0}, {'CPU': 1.0}]" in refused
    assert result["refused_after_s"] < 10
