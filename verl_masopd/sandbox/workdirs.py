"""The runs' working folders on the host, and the removal of those whose owner died.

A run's folder (in the temp directory) holds its main.py; it is removed when the run ends. A
process killed meanwhile (SIGKILL, the OOM killer) cannot remove its folders, so each folder is
named after its owner, `masopd-sandbox-<pid namespace>-<pid>-<start time>-<random>` (the pid's
start time from /proc/<pid>/stat, so that a reused pid is not taken for the owner), and the first
run of each process removes the folders of owners of its own PID namespace that are gone.
Folders of other PID namespaces (another container sharing the temp directory), whose owners
cannot be looked up, are left alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

PREFIX = "masopd-sandbox-"
_OWNED = re.compile(rf"{PREFIX}(\d+)-(\d+)-(\d+)-")

logger = logging.getLogger(__name__)


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, field 22 of /proc/<pid>/stat), None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_namespace() -> str:
    return str(os.stat("/proc/self/ns/pid").st_ino)


@functools.lru_cache(maxsize=1)
def owner_tag(pid: int) -> str:
    """The part of a folder's name that names its owner `pid`: `<pid namespace>-<pid>-<start time>`."""
    return f"{_pid_namespace()}-{pid}-{_start_time(pid)}"


def remove_orphans(directory: str) -> list[str]:
    """Remove the run folders in `directory` whose owner (of this PID namespace) is gone; their paths."""
    namespace = _pid_namespace()
    removed = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            owner = _OWNED.match(entry.name)
            if owner is None or owner[1] != namespace or _start_time(int(owner[2])) == owner[3]:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    if removed:
        logger.info("removed %d sandbox folders of processes that are gone", len(removed))
    return removed


@functools.lru_cache(maxsize=1)
def _orphans_removed(pid: int) -> None:
    """Once per process (a forked child, of another pid, does it again)."""
    remove_orphans(tempfile.gettempdir())


@contextlib.contextmanager
def workdir(uid: int | None) -> Iterator[str]:
    """A fresh folder owned by `uid` (when given) for one run, removed afterwards."""
    pid = os.getpid()
    _orphans_removed(pid)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{owner_tag(pid)}-")
    try:
        if uid is not None:
            os.chown(path, uid, uid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
