"""Per-slot cgroups: totals of memory and of processes, and a fair CPU share, for a run's whole process tree.

cgroup v2 where /sys/fs/cgroup is a cgroup2 mount whose memory, pids and cpu controllers can be
enabled below this process's cgroup; else the cgroup v1 memory, pids, cpu and cpuacct
hierarchies. Each slot uid gets one cgroup per hierarchy (made at its first run and kept, like
the slot's network namespace); the runner writes the limits before a run, the run's program
process enters them before it starts main.py (the run's supervisor stays outside, so that its
own run can never slow it down), and the runner reads, while the run lasts and afterwards, the
CPU time the run has used, the states of its tasks, whether the kernel killed a process for
memory and how many tasks the cgroup still holds (zombies included).

Fair share: every slot's cpu cgroup has the weight of one ordinary process (v2 cpu.weight 100,
v1 cpu.shares 1024) and sits beside this process's own tasks, so the kernel divides the CPU
between runs, not between their processes: a run's children (a fork bomb, busy threads) share
their run's one share and can starve neither another run nor the caller. The zygote and the
supervisors it forks (trusted code that sleeps but for a few milliseconds per run) have a cpu
cgroup beside them weighing as ZYGOTE_WEIGHT ordinary processes, so that starting, stopping and
reaping runs stays prompt however busy the runs keep the machine.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
GROUP = "verl-masopd-sandbox"
ZYGOTE_WEIGHT = 64

# file names per version: memory limit, OOM-kill counter (file, key), task count, CPU weight
# (its ordinary value), CPU time used (file, key or "" for the whole file, seconds per unit),
# the cgroup's threads
_V2 = {
    "limit": "memory.max",
    "events": "memory.events",
    "tasks": "pids.current",
    "weight": ("cpu.weight", "100"),
    "usage": ("cpu.stat", "usage_usec", 1e-6),
    "threads": "cgroup.threads",
}
_V1 = {
    "limit": "memory.limit_in_bytes",
    "events": "memory.oom_control",
    "tasks": "pids.current",
    "weight": ("cpu.shares", "1024"),
    "usage": ("cpuacct.usage", "", 1e-9),
    "threads": "tasks",
}


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _write_limit(path: str, value: str, patience: float = 2.0) -> None:
    """Write a memory limit, waiting while the kernel refuses one below the cgroup's usage: the
    last run's memory (its tmpfs, its processes' pages) drains as its namespaces end."""
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


_PF_EXITING = 0x4  # the task has begun to exit (a flag of /proc/<tid>/stat's field 9)


def _task(tid: str) -> tuple[str, bool] | None:
    """A task's scheduling state from /proc (R: running or ready to run) and whether it is
    exiting; None once it is gone."""
    try:
        with open(f"/proc/{tid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[0], bool(int(fields[6]) & _PF_EXITING)
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Cgroups:
    """Where the slots' cgroups live, per controller: slot `uid`'s cgroup is `memory`, `pids`,
    `cpu` and `cpuacct` followed by the uid (all four equal on v2); `zygote` is the cgroup.procs
    file of the zygote's cpu cgroup."""

    version: int
    memory: str
    pids: str
    cpu: str
    cpuacct: str
    zygote: str

    @property
    def files(self) -> dict:
        return _V2 if self.version == 2 else _V1

    def _path(self, controller: str, uid: int, name: str) -> str:
        return os.path.join(f"{getattr(self, controller)}{uid}", name)

    def directories(self, uid: int) -> list[str]:
        return list(dict.fromkeys(f"{prefix}{uid}" for prefix in (self.memory, self.pids, self.cpu, self.cpuacct)))

    def prepare(self, uid: int, memory_bytes: int, tasks: int) -> list[str]:
        """Set the slot's limits and its ordinary CPU weight for the next run; the cgroup.procs
        files its program process joins."""
        for directory in self.directories(uid):
            os.makedirs(directory, exist_ok=True)
        _write_limit(self._path("memory", uid, self.files["limit"]), str(memory_bytes))
        if self.version == 2:
            _write(self._path("memory", uid, "memory.swap.max"), "0")
        _write(self._path("pids", uid, "pids.max"), str(tasks))
        weight, ordinary = self.files["weight"]
        _write(self._path("cpu", uid, weight), ordinary)
        return [os.path.join(directory, "cgroup.procs") for directory in self.directories(uid)]

    def cpu_seconds(self, uid: int) -> float:
        """CPU time every process the slot's runs have had has used so far, in seconds."""
        name, key, unit = self.files["usage"]
        with open(self._path("cpuacct", uid, name)) as handle:
            text = handle.read()
        if key:
            text = next(line for line in text.splitlines() if line.startswith(f"{key} ")).split()[1]
        return int(text) * unit

    def task_states(self, uid: int) -> list[tuple[str, bool]]:
        """(scheduling state, whether exiting) of every task of the slot's cgroup still there."""
        with open(self._path("cpu", uid, self.files["threads"])) as handle:
            return [task for task in map(_task, handle.read().split()) if task is not None]

    def oom_kills(self, uid: int) -> int:
        """How many processes the kernel has killed for the slot's memory limit so far."""
        with open(self._path("memory", uid, self.files["events"])) as handle:
            for line in handle:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def tasks(self, uid: int) -> int:
        """Processes and threads in the slot's cgroup, zombies not yet reaped included."""
        with open(self._path("pids", uid, self.files["tasks"])) as handle:
            return int(handle.read())


_CONTROLLERS = ("memory", "pids", "cpu")
_PROTECTION = "memory and pids totals, CPU share and CPU time per run"


def _zygote_group(cpu: str, version: int) -> str:
    """Make the zygote's cpu cgroup in directory `cpu` (ZYGOTE_WEIGHT); its cgroup.procs file."""
    files = _V2 if version == 2 else _V1
    group = os.path.join(cpu, f"{GROUP}-zygote")
    os.makedirs(group, exist_ok=True)
    weight, ordinary = files["weight"]
    _write(os.path.join(group, weight), str(ZYGOTE_WEIGHT * int(ordinary)))
    return os.path.join(group, "cgroup.procs")


def _v2() -> Cgroups:
    """The v2 hierarchy: every slot's cgroup (and the zygote's) directly below this process's."""
    own = os.path.join(ROOT, _own_paths()[""].lstrip("/"))
    with open(os.path.join(own, "cgroup.controllers")) as handle:
        missing = set(_CONTROLLERS) - set(handle.read().split())
    if missing:
        raise OSError(f"cgroup v2 controllers {sorted(missing)} not available in {own}")
    _write(os.path.join(own, "cgroup.subtree_control"), " ".join(f"+{name}" for name in _CONTROLLERS))
    slots = os.path.join(own, f"{GROUP}-slot-")
    return Cgroups(2, slots, slots, slots, slots, _zygote_group(own, 2))


def _v1() -> Cgroups:
    """The v1 hierarchies: memory and pids slots in a group of their own below this process's
    cgroup, cpu and cpuacct slots (and the zygote's cpu cgroup) directly in it."""
    own = _own_paths()
    bases = {}
    for controller in ("memory", "pids", "cpu", "cpuacct"):
        if controller not in own or not os.path.isdir(os.path.join(ROOT, controller)):
            raise OSError(f"no cgroup v1 {controller} hierarchy")
        bases[controller] = os.path.join(ROOT, controller, own[controller].lstrip("/"))
    prefixes = []
    for controller, base in bases.items():
        if controller in ("memory", "pids"):
            os.makedirs(os.path.join(base, GROUP), exist_ok=True)
            prefixes.append(os.path.join(base, GROUP, "slot-"))
        else:
            prefixes.append(os.path.join(base, f"{GROUP}-slot-"))
    return Cgroups(1, *prefixes, _zygote_group(bases["cpu"], 1))


def find_cgroups() -> tuple[Cgroups | None, str]:
    """The slots' cgroups this host allows, with a description, or None with the reason."""
    reasons = []
    if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        try:
            return _v2(), f"cgroup v2 {_PROTECTION}"
        except OSError as error:
            reasons.append(f"cgroup v2: {error}")
    try:
        return _v1(), f"cgroup v1 {_PROTECTION}"
    except OSError as error:
        reasons.append(f"cgroup v1: {error}")
    return None, "; ".join(reasons)
