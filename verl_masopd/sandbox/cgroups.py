"""Per-slot cgroups: totals of memory and of processes for a run's whole process tree.

cgroup v2 where /sys/fs/cgroup is a cgroup2 mount whose memory and pids controllers can be
enabled below this process's cgroup; else the cgroup v1 memory and pids hierarchies. Each slot
uid gets one cgroup (made at its first run and kept, like the slot's network namespace); the
runner writes the limits before a run, the run's init process enters it before it starts the
program, and the runner reads afterwards whether the kernel killed a process for memory and
how many tasks the cgroup still holds (zombies included).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
GROUP = "verl-masopd-sandbox"

# file names per version: memory limit, OOM-kill counter (file, key), task count
_V2 = {"limit": "memory.max", "events": "memory.events", "tasks": "pids.current"}
_V1 = {"limit": "memory.limit_in_bytes", "events": "memory.oom_control", "tasks": "pids.current"}


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _write_limit(path: str, value: str, patience: float = 2.0) -> None:
    """Write a memory limit, waiting while the kernel refuses one below the cgroup's usage: the
    last run's memory (its tmpfs, its supervisor's pages) drains as its namespaces end."""
    deadline = time.monotonic() + patience
    while True:
        try:
            _write(path, value)
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller ("" for the v2 hierarchy), from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


@dataclass(frozen=True)
class Cgroups:
    """Where the slots' cgroups live: `memory` and `pids` are the parent directories (equal on v2)."""

    version: int
    memory: str
    pids: str

    @property
    def files(self) -> dict[str, str]:
        return _V2 if self.version == 2 else _V1

    def directories(self, uid: int) -> list[str]:
        return list(dict.fromkeys(os.path.join(base, f"slot-{uid}") for base in (self.memory, self.pids)))

    def prepare(self, uid: int, memory_bytes: int, tasks: int) -> list[str]:
        """Set the slot's limits for the next run; the cgroup.procs files its init process joins."""
        memory, pids = (os.path.join(base, f"slot-{uid}") for base in (self.memory, self.pids))
        for directory in self.directories(uid):
            os.makedirs(directory, exist_ok=True)
        _write_limit(os.path.join(memory, self.files["limit"]), str(memory_bytes))
        if self.version == 2:
            _write(os.path.join(memory, "memory.swap.max"), "0")
        _write(os.path.join(pids, "pids.max"), str(tasks))
        return [os.path.join(directory, "cgroup.procs") for directory in self.directories(uid)]

    def oom_kills(self, uid: int) -> int:
        """How many processes the kernel has killed for the slot's memory limit so far."""
        with open(os.path.join(self.memory, f"slot-{uid}", self.files["events"])) as handle:
            for line in handle:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def tasks(self, uid: int) -> int:
        """Processes and threads in the slot's cgroup, zombies not yet reaped included."""
        with open(os.path.join(self.pids, f"slot-{uid}", self.files["tasks"])) as handle:
            return int(handle.read())


def _v2() -> Cgroups:
    own = os.path.join(ROOT, _own_paths()[""].lstrip("/"))
    with open(os.path.join(own, "cgroup.controllers")) as handle:
        missing = {"memory", "pids"} - set(handle.read().split())
    if missing:
        raise OSError(f"cgroup v2 controllers {sorted(missing)} not available in {own}")
    group = os.path.join(own, GROUP)
    os.makedirs(group, exist_ok=True)
    _write(os.path.join(own, "cgroup.subtree_control"), "+memory +pids")
    _write(os.path.join(group, "cgroup.subtree_control"), "+memory +pids")
    return Cgroups(2, group, group)


def _v1() -> Cgroups:
    own = _own_paths()
    bases = []
    for controller in ("memory", "pids"):
        if controller not in own or not os.path.isdir(os.path.join(ROOT, controller)):
            raise OSError(f"no cgroup v1 {controller} hierarchy")
        base = os.path.join(ROOT, controller, own[controller].lstrip("/"), GROUP)
        os.makedirs(base, exist_ok=True)
        bases.append(base)
    return Cgroups(1, *bases)


def find_cgroups() -> tuple[Cgroups | None, str]:
    """The slots' cgroups this host allows, with a description, or None with the reason."""
    reasons = []
    if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        try:
            return _v2(), "cgroup v2 memory and pids"
        except OSError as error:
            reasons.append(f"cgroup v2: {error}")
    try:
        return _v1(), "cgroup v1 memory and pids"
    except OSError as error:
        reasons.append(f"cgroup v1: {error}")
    return None, "; ".join(reasons)
