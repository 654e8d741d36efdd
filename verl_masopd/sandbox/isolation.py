"""What isolation this host allows, and the unprivileged uid slots runs execute under.

Runs started by root execute under a uid from a small range reserved per concurrent run
(`SLOT_UID_BASE` .. + `SLOT_COUNT`), held with a file lock so that separate processes never
share one. Under that uid the process-count rlimit binds and every process of the run can be
found and killed. Network and mount namespaces are used when the kernel permits them; where it
does not, the missing isolation is recorded in `Isolation.warnings` and logged once.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

SLOT_UID_BASE = 64000
SLOT_COUNT = 64
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_CLEAN_MARK = "clean"

logger = logging.getLogger(__name__)

_PROBE = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x40020000) != 0)"


@dataclass(frozen=True)
class Isolation:
    """privileged: runs drop to a slot uid; namespaces: private network and mounts."""

    privileged: bool
    namespaces: bool
    expose: tuple[tuple[str, tuple[str, ...]], ...]
    shadow: tuple[str, ...]
    warnings: tuple[str, ...]


def _unreachable_ancestor(path: str) -> str | None:
    """The highest directory on `path` that other users cannot traverse, if any."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def _interpreter_exposure() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Interpreter directories hidden from other users, grouped by the ancestor that hides them."""
    roots = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}
    roots |= {path for path in sysconfig.get_paths().values() if os.path.isdir(path)}
    hidden: dict[str, set[str]] = {}
    for root in {os.path.realpath(root) for root in roots}:
        ancestor = _unreachable_ancestor(root)
        if ancestor is not None:
            hidden.setdefault(ancestor, set()).add(root)
    return tuple(
        (ancestor, tuple(path for path in sorted(paths) if not any(path.startswith(other + "/") for other in paths)))
        for ancestor, paths in sorted(hidden.items())
    )


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once per process what this host allows; warn once about what is missing."""
    privileged = os.geteuid() == 0
    warnings = []
    namespaces = False
    if not privileged:
        warnings.append("not running as root: programs keep the caller's uid, no process-count limit or namespaces")
    else:
        probe = subprocess.run([sys.executable, "-s", "-B", "-c", _PROBE], env={}, capture_output=True)
        namespaces = probe.returncode == 0
        if not namespaces:
            warnings.append("unshare(CLONE_NEWNET|CLONE_NEWNS) not permitted: programs have the host network")
    expose = _interpreter_exposure() if namespaces else ()
    if privileged and not namespaces and _interpreter_exposure():
        warnings.append("the interpreter is not readable by the sandbox uid and cannot be exposed without namespaces")
    shadow = tuple(path for path in WORLD_WRITABLE_DIRS if os.path.isdir(path) and not os.path.islink(path))
    for warning in warnings:
        logger.warning("sandbox isolation reduced: %s", warning)
    return Isolation(privileged, namespaces, expose, shadow if namespaces else (), tuple(warnings))


def slot_lock_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), "verl_masopd_sandbox_slots")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def slot_uid() -> Iterator[int]:
    """Hold one slot uid exclusively (across threads and processes) for the duration of a run.

    A holder whose block ends without an exception has seen every process of the uid end (the
    run's supervisor kills them before it reports, the runner when no report came) and marks the
    slot clean in its lock file; the next holder searches /proc for leftovers to kill only when
    that mark is missing (a holder crashed or raised).
    """
    lock_dir = slot_lock_dir()
    while True:
        offset = random.randrange(SLOT_COUNT)
        for index in range(SLOT_COUNT):
            uid = SLOT_UID_BASE + (offset + index) % SLOT_COUNT
            handle = open(os.path.join(lock_dir, str(uid)), "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            with handle:
                handle.seek(0)
                clean = handle.read() == _CLEAN_MARK
                handle.truncate(0)
                handle.flush()
                if not clean:
                    kill_uid_processes(uid)
                yield uid
                handle.write(_CLEAN_MARK)
            return
        time.sleep(0.005)


def uid_processes(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is `uid`, read from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                status = handle.read()
        except OSError:
            continue
        uid_line = status[status.index(b"\nUid:") + 5 :].split(None, 1)[0]
        if int(uid_line) == uid and b"\nState:\tZ" not in status:
            found.append(int(name))
    return found


def kill_uid_processes(uid: int, rounds: int = 1000) -> bool:
    """SIGKILL every process of `uid` until none is left; whether none is (bounded: a process
    stuck in the kernel cannot be waited for forever)."""
    for _ in range(rounds):
        pids = uid_processes(uid)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    logger.warning("sandbox uid %d still has processes %s after SIGKILL", uid, uid_processes(uid))
    return False


def remove_uid_files(uid: int, directories: tuple[str, ...]) -> None:
    """Delete the entries of world-writable `directories` owned by `uid` (runs without namespaces)."""
    for directory in directories:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
