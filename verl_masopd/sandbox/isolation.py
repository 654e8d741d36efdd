"""What isolation this host allows, and the unprivileged uid slots runs execute under.

Runs started by root execute under a uid from a small range reserved per concurrent run
(`SLOT_UID_BASE` .. + `SLOT_COUNT`), held with a file lock so that separate processes never
share one. Under that uid the process-count rlimit binds and every process of the run can be
found and killed. Where the kernel permits namespaces, each run has its own network, IPC, mount
and PID namespaces and sees a filesystem of its own (`Isolation.view`: the system's programs
and libraries and the interpreter's directories, read-only, plus a size-limited /tmp); where
cgroups are available, its process tree has memory and process-count totals, one fair share of
the CPU and a measured CPU time (cgroups.py, timing.py).
`Isolation.protections` names what is active and is logged once at start-up; what is missing
is in `Isolation.warnings`.
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
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from verl_masopd.sandbox.cgroups import Cgroups, find_cgroups

SLOT_UID_BASE = 64000
SLOT_COUNT = 64
SLOT_WAIT_S = 60.0
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# What a program's filesystem holds besides the interpreter: system programs and libraries,
# the dynamic linker's cache and the time zone (read-only), and the harmless devices.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_CLEAN_MARK = "clean"
_SLOT_POLL_S = (0.005, 0.05)
_UNCLEAN_SLOT_ROUNDS = 100  # a slot whose leftovers outlast this is passed over for another

logger = logging.getLogger(__name__)

# A child in fresh network, mount and PID namespaces that mounts a proc filesystem: what every run does.
_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL(None)
if libc.unshare(0x40020000 | 0x08000000 | 0x20000000) != 0:
    sys.exit(1)
child = os.fork()
if child == 0:
    ok = libc.mount(None, b"/", None, 16384 | (1 << 18), None) == 0
    ok = ok and libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) == 0
    os._exit(0 if ok and os.getpid() == 1 else 1)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) != 0)
"""


@dataclass(frozen=True)
class Isolation:
    """privileged: runs drop to a slot uid; namespaces: private network, IPC, mounts and PIDs
    with the filesystem `view` ((path, symlink target or "") entries, bound read-only) and
    `devices` (character devices made anew in the run's /dev) on a tmpfs mounted, in the run's
    own mount namespace, at `root` (an empty directory of the host that stays);
    cgroups: per-run memory and process totals, CPU share and CPU time; protections: what is
    active, in words."""

    privileged: bool
    namespaces: bool
    root: str
    view: tuple[tuple[str, str], ...]
    devices: tuple[str, ...]
    cgroups: Cgroups | None
    protections: tuple[str, ...]
    warnings: tuple[str, ...]


def _interpreter_paths() -> set[str]:
    """The interpreter's installation and environment (stdlib, site-packages, headers)."""
    roots = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}
    roots |= {path for path in sysconfig.get_paths().values() if os.path.isdir(path)}
    return {os.path.realpath(root) for root in roots}


def filesystem_view() -> tuple[tuple[str, str], ...]:
    """What a run's filesystem holds: (path, "") bound read-only, (path, target) as a symlink.
    Interpreter paths inside one another are bound once, at the outermost."""
    entries = {}
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            entries[path] = os.readlink(path)
        elif os.path.exists(path):
            entries[path] = ""
    paths = {path for path in _interpreter_paths() if os.path.exists(path)}
    for path in paths:
        if not any(path.startswith(other.rstrip("/") + "/") for other in paths | set(entries)):
            entries.setdefault(path, "")
    return tuple(sorted(entries.items()))


_probe_lock = threading.Lock()


def isolation() -> Isolation:
    """What this host allows, probed once per process: concurrent first callers wait for the one
    probe (a probe per thread would start as many interpreters at once). `isolation.cache_clear()`
    forgets it."""
    with _probe_lock:
        return _probe()


@functools.lru_cache(maxsize=1)
def _probe() -> Isolation:
    """Probe what this host allows; log what is active and warn about what is missing."""
    privileged = os.geteuid() == 0
    warnings = []
    namespaces = False
    cgroups = None
    protections = []
    if not privileged:
        warnings.append("not running as root: programs keep the caller's uid, no process-count limit or namespaces")
    else:
        protections.append(f"unprivileged slot uids ({SLOT_COUNT}) with per-process rlimits")
        probe = subprocess.run([sys.executable, "-s", "-B", "-c", _PROBE], env={}, capture_output=True)
        namespaces = probe.returncode == 0
        if namespaces:
            protections.append("network, IPC, mount and PID namespaces")
            protections.append("read-only filesystem view of the system and the interpreter")
            protections.append("size-limited tmpfs for the run's files")
        else:
            warnings.append(
                "namespaces (network, IPC, mount, PID with its /proc) not permitted: programs have the host "
                "network, the host filesystem and see every process"
            )
    if namespaces:
        cgroups, described = find_cgroups()
        if cgroups is None:
            warnings.append(
                f"no cgroups ({described}): memory is capped per process, processes per uid; the CPU is shared "
                "per process and a run's time is its wall clock alone"
            )
        else:
            protections.append(described)
    for warning in warnings:
        logger.warning("sandbox isolation reduced: %s", warning)
    logger.info("sandbox protections: %s", "; ".join(protections) or "none")
    view = filesystem_view() if namespaces else ()
    devices = tuple(device for device in DEVICES if namespaces and os.path.exists(device))
    root = os.path.join(slot_lock_dir(), "root") if namespaces else ""
    if root:
        os.makedirs(root, exist_ok=True)
    return Isolation(privileged, namespaces, root, view, devices, cgroups, tuple(protections), tuple(warnings))


isolation.cache_clear = _probe.cache_clear


def slot_lock_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), "verl_masopd_sandbox_slots")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class SlotUnavailable(Exception):
    """No slot uid became free within the wait allowed."""


_local_slots = threading.BoundedSemaphore(SLOT_COUNT)


def _reset_after_fork() -> None:
    """A forked child must not inherit a lock or slots some parent thread held."""
    global _local_slots, _probe_lock
    _local_slots = threading.BoundedSemaphore(SLOT_COUNT)
    _probe_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _take_free_slot(lock_dir: str, deadline: float, wait: float):
    """Lock a slot whose last run has nothing left: (its open lock file, its uid)."""
    pause = _SLOT_POLL_S[0]
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
            handle.seek(0)
            clean = handle.read() == _CLEAN_MARK
            if clean or kill_uid_processes(uid, rounds=_UNCLEAN_SLOT_ROUNDS):
                handle.truncate(0)
                handle.flush()
                return handle, uid
            handle.close()
        if time.monotonic() >= deadline:
            raise SlotUnavailable(f"no sandbox slot free within {wait:g}s")
        time.sleep(pause)
        pause = min(2 * pause, _SLOT_POLL_S[1])


@contextlib.contextmanager
def slot_uid(wait: float = SLOT_WAIT_S) -> Iterator[int]:
    """Hold one slot uid exclusively (across threads and processes) for the duration of a run.

    At most SLOT_COUNT threads of a process look for a slot at once (the others wait in turn);
    a slot is found within `wait` seconds or SlotUnavailable is raised. A holder whose block ends
    without an exception has seen every process of the uid end (the runner checks it) and marks
    the slot clean in its lock file; a slot without that mark is taken only once every process
    of its uid, zombies included, is gone.
    """
    deadline = time.monotonic() + wait
    slots = _local_slots
    if not slots.acquire(timeout=wait):
        raise SlotUnavailable(f"no sandbox slot free within {wait:g}s")
    try:
        handle, uid = _take_free_slot(slot_lock_dir(), deadline, wait)
        with handle:
            yield uid
            handle.write(_CLEAN_MARK)
    finally:
        slots.release()


def uid_processes(uid: int) -> tuple[list[int], int]:
    """Live processes whose real uid is `uid` and the count of its zombies, read from /proc."""
    found, zombies = [], 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                status = handle.read()
        except OSError:
            continue
        uid_line = status[status.index(b"\nUid:") + 5 :].split(None, 1)[0]
        if int(uid_line) == uid:
            if b"\nState:\tZ" in status:
                zombies += 1
            else:
                found.append(int(name))
    return found, zombies


def kill_uid_processes(uid: int, rounds: int = 1000) -> bool:
    """SIGKILL every process of `uid` until none is left, zombies included (they count against
    the uid's process limit until reaped); whether none is (bounded: a process stuck in the
    kernel or a zombie its parent does not reap cannot be waited for forever)."""
    for _ in range(rounds):
        pids, zombies = uid_processes(uid)
        if not pids and not zombies:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    logger.warning("sandbox uid %d still has processes (live, zombies) %s after SIGKILL", uid, uid_processes(uid))
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
