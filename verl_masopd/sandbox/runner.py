"""run_program / run_many: execute untrusted Python on a stdin, contained, and never raise.

Each run is a fresh fork of the sandbox zygote (zygote.py, bootstrap.py), so no interpreter
starts per run; this side takes a slot uid (waiting at most `slot_wait` seconds, not counted in
the program's time), prepares its cgroup, working directory, stdin and pipes, reads the output
and the supervisor's report, enforces the run's time limits (timing.py: wall clock and CPU time,
counted from the program's start) and the output cap, and turns the outcome into an ExecResult.
A failure of the sandbox itself is retried once with a fresh slot, then returned as an
infrastructure failure, never as the program's; so is a run the machine starved of CPU until its
timeout (not retried: its time is up).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from verl_masopd.sandbox.errors import describe_failure, starved_reason
from verl_masopd.sandbox.isolation import (
    SLOT_COUNT,
    SLOT_WAIT_S,
    WORLD_WRITABLE_DIRS,
    SlotUnavailable,
    isolation,
    kill_uid_processes,
    remove_uid_files,
    slot_uid,
)
from verl_masopd.sandbox.limits import STDERR_TAIL_BYTES, ExecResult, Limits, checked_seconds
from verl_masopd.sandbox.timing import RunClock
from verl_masopd.sandbox.workdirs import workdir
from verl_masopd.sandbox.zygote import ZYGOTE_ENV, Run, SandboxError, start_run

logger = logging.getLogger(__name__)

_SUPERVISOR_GRACE_S = 5.0
_ATTEMPTS = 2
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
def _run_identity(slot_wait: float) -> Iterator[int | None]:
    if not isolation().privileged:
        yield None
        return
    with slot_uid(slot_wait) as uid:
        yield uid


def _collect(run: Run, stdout_pipe, stderr_pipe, clock: RunClock, output_bytes: int):
    """Read stdout (capped), the stderr tail and the supervisor's report until the report has come
    and both pipes have closed, a limit of `clock` is reached or the cap is hit: (stdout, stderr,
    the report or None, the limit reached or None, whether the cap was hit)."""
    stdout, stderr = bytearray(), bytearray()
    report = limit = None
    truncated = False
    with selectors.DefaultSelector() as selector:
        selector.register(stdout_pipe, selectors.EVENT_READ, stdout)
        selector.register(stderr_pipe, selectors.EVENT_READ, stderr)
        selector.register(run.channel, selectors.EVENT_READ, None)
        while selector.get_map():
            now = time.monotonic()
            limit = clock.limit(now)
            if limit is not None:
                break
            for key, _ in selector.select(clock.wait(now)):
                if key.data is None:
                    report = run.reply(now)
                    selector.unregister(key.fileobj)
                    continue
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
    return bytes(stdout), bytes(stderr), report, limit, truncated


def _supervised(run: Run, stdout_pipe, stderr_pipe, clock: RunClock, limits: Limits):
    """Collect the run's output and its supervisor's report; stop the run at a limit or the output
    cap. Also whether the wall clock ran out on a starved run (timing.py), and the run's CPU time
    (at that moment for a starved run, else once it has ended)."""
    stdout, stderr, report, limit, truncated = _collect(run, stdout_pipe, stderr_pipe, clock, limits.output_bytes)
    cpu_time = clock.cpu_time() if limit == "wall" else None
    starved = limit == "wall" and clock.starved(cpu_time)
    if report is None:
        run.stop()
        report = run.reply(time.monotonic() + _SUPERVISOR_GRACE_S)
        if report is None:
            run.kill_supervisor(_SUPERVISOR_GRACE_S)
            report = {"error": "the run's supervisor did not report"}
    if not starved:
        cpu_time = clock.cpu_time()
    return stdout, stderr, report, limit, starved, truncated, cpu_time


def _ensure_empty(uid: int) -> None:
    """After a run whose supervisor did not report: raise unless nothing of the run is left (its
    cgroup's count, else the uid's processes in /proc). A supervisor's report says by itself
    that nothing of its run but the supervisor, which exits at once, is left."""
    cgroups = isolation().cgroups
    if cgroups is not None and cgroups.tasks(uid) == 0:
        return
    if not kill_uid_processes(uid):
        raise SandboxError(f"processes of sandbox uid {uid} survived SIGKILL")


def _execute(code: str, stdin: str, timeout: float, limits: Limits, slot_wait: float) -> ExecResult:
    setup = isolation()
    with _run_identity(slot_wait) as uid, workdir(uid) as workdir_path, tempfile.TemporaryFile() as stdin_file:
        Path(workdir_path, "main.py").write_text(code, encoding="utf-8", errors="surrogateescape")
        stdin_file.write(stdin.encode("utf-8", errors="surrogateescape"))
        stdin_file.seek(0)
        cwd = "/tmp" if setup.namespaces else workdir_path
        cgroups = setup.cgroups if uid is not None else None
        mib = 1024 * 1024
        config = {
            "uid": uid,
            "workdir": workdir_path,
            "cwd": cwd,
            "env": _environment(cwd),
            "namespaces": setup.namespaces,
            "root": setup.root,
            "view": setup.view,
            "devices": setup.devices,
            "disk_bytes": limits.disk_mb * mib,
            "cgroups": cgroups.prepare(uid, (limits.memory_mb + limits.disk_mb) * mib, limits.processes)
            if cgroups
            else [],
            "rlimits": _rlimits(limits),
        }
        oom_kills = cgroups.oom_kills(uid) if cgroups else 0
        clock = RunClock(timeout, cgroups, uid)
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        with open(stdout_read, "rb", buffering=0) as stdout_pipe, open(stderr_read, "rb", buffering=0) as stderr_pipe:
            try:
                run = start_run(
                    config, (stdin_file.fileno(), stdout_write, stderr_write), setup.cgroups and setup.cgroups.zygote
                )
            finally:
                os.close(stdout_write)
                os.close(stderr_write)
            start = time.monotonic()
            clock.start(start)
            with run:
                stdout, stderr, report, limit, starved, truncated, cpu_time = _supervised(
                    run, stdout_pipe, stderr_pipe, clock, limits
                )
        if uid is not None and "status" not in report:
            _ensure_empty(uid)
        if "error" in report and limit is None:
            raise SandboxError(report["error"])
        if uid is not None and not setup.namespaces:
            remove_uid_files(uid, WORLD_WRITABLE_DIRS)
        memory_killed = bool(cgroups) and cgroups.oom_kills(uid) > oom_kills
    stderr_text = stderr.decode("utf-8", errors="replace")
    status = None if limit else report["status"]
    exit_code = None if status is None else os.waitstatus_to_exitcode(status)
    error = describe_failure(exit_code, stderr_text, limit, truncated, timeout, limits.output_bytes, memory_killed)
    return ExecResult(
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr_text,
        exit_code=exit_code,
        timed_out=limit is not None,
        duration=time.monotonic() - start,
        error=starved_reason(cpu_time, timeout) if starved else error,
        truncated=truncated,
        infrastructure_failure=starved,
        limit=limit,
        cpu_time=cpu_time,
    )


def _infrastructure_failure(reason: str) -> ExecResult:
    return ExecResult("", "", None, False, 0.0, f"sandbox failure: {reason}", infrastructure_failure=True)


def run_program(
    code: str,
    stdin: str = "",
    timeout: float = 10.0,
    limits: Limits | None = None,
    slot_wait: float = SLOT_WAIT_S,
) -> ExecResult:
    """Run `code` as a Python program on `stdin` under `timeout` seconds of wall clock and of CPU
    time (timing.py) and `limits`, waiting at most `slot_wait` seconds for a slot.

    Never raises for anything the program does: a failure of the sandbox itself is retried once,
    then returned as an ExecResult with `infrastructure_failure` set and its reason. A `timeout`
    or `slot_wait` that is not a number of seconds up to limits.MAX_SECONDS (one day), above 0
    (`slot_wait`: or 0), is the caller's error: ValueError.
    """
    timeout = checked_seconds("timeout", timeout)
    slot_wait = checked_seconds("slot_wait", slot_wait, zero=True)
    for attempt in range(_ATTEMPTS):
        try:
            return _execute(code, stdin, timeout, limits or Limits(), slot_wait)
        except SlotUnavailable as error:
            return _infrastructure_failure(str(error))
        except Exception as error:  # the rollout loop must never see an exception from execution
            logger.warning("sandbox failure (attempt %d of %d)", attempt + 1, _ATTEMPTS, exc_info=True)
            reason = f"{type(error).__name__}: {error}"
    return _infrastructure_failure(reason)


def run_many(
    jobs: list[tuple[str, str]],
    timeout: float = 10.0,
    limits: Limits | None = None,
    max_workers: int | None = None,
    slot_wait: float = SLOT_WAIT_S,
) -> list[ExecResult]:
    """Run (code, stdin) jobs concurrently on a bounded pool; results in the order of `jobs`.

    The pool has at most SLOT_COUNT workers as root (no more runs of one process can hold a slot
    at once), `max_workers` or the CPU count otherwise. A bad `timeout` or `slot_wait` is a
    ValueError before anything runs, as in run_program.
    """
    checked_seconds("timeout", timeout)
    checked_seconds("slot_wait", slot_wait, zero=True)
    if not jobs:
        return []
    workers = min(max_workers or os.cpu_count() or 1, len(jobs))
    if isolation().privileged:
        workers = min(workers, SLOT_COUNT)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda job: run_program(job[0], job[1], timeout, limits, slot_wait), jobs))
