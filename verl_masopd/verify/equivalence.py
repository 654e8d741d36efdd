"""math_equal: math-verify equivalence, bounded in time and safe from any thread.

math-verify bounds its own work with SIGALRM, which only works on a process's main thread. So
each comparison runs in a worker process (verl_masopd.verify.math_worker) on its main thread; a
worker that misses the caller's deadline is killed and replaced. Idle workers are reused.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import selectors
import subprocess
import sys
import threading
import time

logger = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 120.0
_idle: list[subprocess.Popen] = []
_idle_lock = threading.Lock()


def _read_line(proc: subprocess.Popen, deadline: float) -> str | None:
    """One line from the worker, or None when the deadline passes or the worker dies."""
    data = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                return None
            data.extend(chunk)
    return data.decode().strip()


def _start_worker() -> subprocess.Popen | None:
    proc = subprocess.Popen(
        [sys.executable, "-s", "-B", "-m", "verl_masopd.verify.math_worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    if _read_line(proc, time.monotonic() + _STARTUP_TIMEOUT_S) == "ready":
        return proc
    logger.error("math-verify worker failed to start")
    _kill(proc)
    return None


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def _take_worker() -> subprocess.Popen | None:
    with _idle_lock:
        if _idle:
            return _idle.pop()
    return _start_worker()


@atexit.register
def _close_workers() -> None:
    with _idle_lock:
        while _idle:
            _kill(_idle.pop())


def math_equal(pred: str, gold: str, timeout: float = 5.0) -> bool:
    """True when math-verify finds `pred` equivalent to `gold` within `timeout` seconds.

    Never raises: unparsable input, a worker failure or a missed deadline give False.
    """
    try:
        worker = _take_worker()
        if worker is None:
            return False
        request = json.dumps([str(pred), str(gold), max(1, math.ceil(timeout))]) + "\n"
        worker.stdin.write(request.encode())
        worker.stdin.flush()
        reply = _read_line(worker, time.monotonic() + timeout)
        if reply is None:
            _kill(worker)
            return False
        with _idle_lock:
            _idle.append(worker)
        return reply == "true"
    except Exception:  # untrusted answers must never raise into the rollout loop
        logger.exception("math_equal failed")
        return False
