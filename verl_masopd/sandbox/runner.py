"""run_program / run_many: execute untrusted Python on a stdin, contained, and never raise.

Each run is a fresh fork of the sandbox zygote (zygote.py, bootstrap.py), so no interpreter
starts per run; this side prepares the run's uid, working directory, stdin and pipes, reads the
output, enforces the deadline and the output cap, and turns the outcome into an ExecResult.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from verl_masopd.sandbox.errors import describe_failure
from verl_masopd.sandbox.isolation import (
    WORLD_WRITABLE_DIRS,
    isolation,
    kill_uid_processes,
    remove_uid_files,
    slot_uid,
)
from verl_masopd.sandbox.limits import STDERR_TAIL_BYTES, ExecResult, Limits
from verl_masopd.sandbox.zygote import ZYGOTE_ENV, Run, SandboxError, start_run

logger = logging.getLogger(__name__)

_SUPERVISOR_GRACE_S = 1.0
_OPEN_FILES = 256
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def _environment(home: str) -> dict[str, str]:
    """The whole environment a program sees: nothing of the caller's (tokens, keys) leaks in."""
    env = {**ZYGOTE_ENV, "HOME": home, "TMPDIR": home}
    env.update({name: "1" for name in _THREAD_ENV})
    return env


def _rlimits(limits: Limits) -> dict[str, int]:
    mib = 1024 * 1024
    return {
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_FSIZE": limits.file_size_mb * mib,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_NOFILE": _OPEN_FILES,
        "RLIMIT_CORE": 0,
    }


@contextlib.contextmanager
def _workdir(uid: int | None) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="masopd-sandbox-")
    try:
        if uid is not None:
            os.chown(path, uid, uid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _run_identity() -> Iterator[int | None]:
    if not isolation().privileged:
        yield None
        return
    with slot_uid() as uid:
        yield uid


def _collect(stdout_pipe, stderr_pipe, deadline: float, output_bytes: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout (capped) and the stderr tail until both close, the deadline passes or the cap is hit."""
    stdout, stderr = bytearray(), bytearray()
    timed_out = truncated = False
    with selectors.DefaultSelector() as selector:
        selector.register(stdout_pipe, selectors.EVENT_READ, stdout)
        selector.register(stderr_pipe, selectors.EVENT_READ, stderr)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is stderr and len(stderr) > STDERR_TAIL_BYTES:
                    del stderr[:-STDERR_TAIL_BYTES]
            if len(stdout) > output_bytes:
                del stdout[output_bytes:]
                truncated = True
                break
    return bytes(stdout), bytes(stderr), timed_out, truncated


def _supervised(run: Run, stdout_pipe, stderr_pipe, deadline: float, limits: Limits):
    """Collect the run's output and its supervisor's reply; stop the run at the deadline or the output cap."""
    stdout, stderr, timed_out, truncated = _collect(stdout_pipe, stderr_pipe, deadline, limits.output_bytes)
    reply = None if timed_out or truncated else run.reply(deadline)
    if reply is None:
        timed_out = not truncated
        run.stop()
        reply = run.reply(time.monotonic() + _SUPERVISOR_GRACE_S)
        if reply is None:
            run.kill_supervisor(_SUPERVISOR_GRACE_S)
            reply = {"error": "the run's supervisor did not report"}
    return stdout, stderr, timed_out, truncated, reply


def _execute(code: str, stdin: str, timeout: float, limits: Limits) -> ExecResult:
    setup = isolation()
    start = time.monotonic()
    with _run_identity() as uid, _workdir(uid) as workdir, tempfile.TemporaryFile() as stdin_file:
        Path(workdir, "main.py").write_text(code, encoding="utf-8", errors="surrogateescape")
        stdin_file.write(stdin.encode("utf-8", errors="surrogateescape"))
        stdin_file.seek(0)
        cwd = "/tmp" if setup.shadow else workdir
        config = {
            "uid": uid,
            "workdir": workdir,
            "cwd": cwd,
            "env": _environment(cwd),
            "namespaces": setup.namespaces,
            "expose": setup.expose,
            "shadow": setup.shadow,
            "rlimits": _rlimits(limits),
        }
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        with open(stdout_read, "rb", buffering=0) as stdout_pipe, open(stderr_read, "rb", buffering=0) as stderr_pipe:
            try:
                run = start_run(config, (stdin_file.fileno(), stdout_write, stderr_write))
            finally:
                os.close(stdout_write)
                os.close(stderr_write)
            with run:
                stdout, stderr, timed_out, truncated, reply = _supervised(
                    run, stdout_pipe, stderr_pipe, start + timeout, limits
                )
        if uid is not None and "status" not in reply and not kill_uid_processes(uid):
            raise SandboxError(f"processes of sandbox uid {uid} survived SIGKILL")
        if uid is not None and not setup.shadow:
            remove_uid_files(uid, WORLD_WRITABLE_DIRS)
    stderr_text = stderr.decode("utf-8", errors="replace")
    if "error" in reply:
        raise SandboxError(reply["error"])
    exit_code = None if timed_out else os.waitstatus_to_exitcode(reply["status"])
    return ExecResult(
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr_text,
        exit_code=exit_code,
        timed_out=timed_out,
        duration=time.monotonic() - start,
        error=describe_failure(exit_code, stderr_text, timed_out, truncated, timeout, limits.output_bytes),
        truncated=truncated,
    )


def run_program(code: str, stdin: str = "", timeout: float = 10.0, limits: Limits | None = None) -> ExecResult:
    """Run `code` as a Python program on `stdin` under `timeout` seconds of wall clock and `limits`.

    Never raises: a failure of the sandbox itself is returned as an ExecResult with its reason.
    """
    try:
        return _execute(code, stdin, timeout, limits or Limits())
    except Exception as error:  # the rollout loop must never see an exception from execution
        logger.exception("sandbox failure")
        return ExecResult("", "", None, False, 0.0, f"sandbox failure: {type(error).__name__}: {error}")


def run_many(
    jobs: list[tuple[str, str]],
    timeout: float = 10.0,
    limits: Limits | None = None,
    max_workers: int | None = None,
) -> list[ExecResult]:
    """Run (code, stdin) jobs concurrently on a bounded pool; results in the order of `jobs`."""
    if not jobs:
        return []
    workers = max_workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda job: run_program(job[0], job[1], timeout, limits), jobs))
