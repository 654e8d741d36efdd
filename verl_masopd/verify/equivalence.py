"""math_equal: math-verify equivalence, bounded in time and safe from any thread.

math-verify bounds its own work with SIGALRM, which only works on a process's main thread and
not inside one long C call (a huge integer power). So each comparison runs in a worker process
(verl_masopd.verify.math_worker) on its main thread; a worker that misses the caller's deadline
is killed and its place freed for a new one. Idle workers are reused, and at most `size` exist
at once: callers beyond that wait for a free place, within their own timeout.

Untrusted answers are bounded before they reach math-verify: an answer longer than
MAX_ANSWER_CHARS is not compared (False), and one comparison, the wait for a worker included,
ends after `timeout` seconds (ANSWER_CHECK_TIMEOUT_S by default; the slowest gold of the
OlympiadBench sample compares with itself in 0.33 s on a loaded machine).
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

MAX_WORKERS = min(4, os.cpu_count() or 1)
MAX_ANSWER_CHARS = 1000
ANSWER_CHECK_TIMEOUT_S = 5.0
_STARTUP_TIMEOUT_S = 120.0


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


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


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


class WorkerPool:
    """At most `size` math-verify worker processes, started on demand and reused while healthy."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"WorkerPool size must be at least 1, got {size}")
        self._places = threading.BoundedSemaphore(size)
        self._idle: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def equal(self, pred: str, gold: str, timeout: float) -> bool:
        """math-verify's verdict; False when the wait for a free worker and the comparison together
        take longer than `timeout` seconds (a new worker's start-up not counted)."""
        started = time.monotonic()
        if not self._places.acquire(timeout=timeout):
            logger.warning("no math-verify worker free within %.1fs", timeout)
            return False
        try:
            remaining = max(0.0, timeout - (time.monotonic() - started))
            worker = self._take()
            if worker is None:
                return False
            request = json.dumps([str(pred), str(gold), max(1, math.ceil(remaining))]) + "\n"
            try:
                worker.stdin.write(request.encode())
                worker.stdin.flush()
                reply = _read_line(worker, time.monotonic() + remaining)
            except OSError:
                reply = None
            if reply is None:
                _kill(worker)
                return False
            with self._lock:
                self._idle.append(worker)
            return reply == "true"
        finally:
            self._places.release()

    def _take(self) -> subprocess.Popen | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _start_worker()

    def close(self) -> None:
        with self._lock:
            while self._idle:
                _kill(self._idle.pop())


_pool = WorkerPool(MAX_WORKERS)
atexit.register(_pool.close)


def math_equal(pred: str, gold: str, timeout: float = ANSWER_CHECK_TIMEOUT_S) -> bool:
    """True when math-verify finds `pred` equivalent to `gold` within `timeout` seconds.

    Never raises: an answer longer than MAX_ANSWER_CHARS, unparsable input, a worker failure or a
    missed deadline give False.
    """
    if len(str(pred)) > MAX_ANSWER_CHARS or len(str(gold)) > MAX_ANSWER_CHARS:
        return False
    try:
        return _pool.equal(pred, gold, timeout)
    except Exception:  # untrusted answers must never raise into the rollout loop
        logger.exception("math_equal failed")
        return False
