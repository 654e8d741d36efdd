"""Resource limits and the outcome record of one sandboxed execution."""

from __future__ import annotations

import math
from dataclasses import dataclass

STDERR_TAIL_BYTES = 8192
# The largest value of each limit, well inside what the kernel and Python represent (rlimits,
# cgroup files, tmpfs sizes, timers): a timeout or a wait of one day, memory and files of 1 TiB,
# the kernel's most processes (PID_MAX_LIMIT), 1 GiB of output (it is held in memory).
MAX_SECONDS = 86400.0
MAX_LIMITS = {
    "memory_mb": 1 << 20,
    "cpu_seconds": int(MAX_SECONDS),
    "file_size_mb": 1 << 20,
    "processes": 1 << 22,
    "output_bytes": 1 << 30,
    "disk_mb": 1 << 20,
}


def checked_seconds(name: str, value: float, zero: bool = False) -> float:
    """`value` as seconds for `name` (a timeout, a wait): a real number above 0 (or 0 itself when
    `zero`) and at most MAX_SECONDS, else ValueError saying so."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not (0 <= number if zero else 0 < number) or not number <= MAX_SECONDS:
        least = "0 or more" if zero else "above 0"
        raise ValueError(f"{name} must be a number of seconds {least}, at most {MAX_SECONDS:g} (a day), got {value!r}")
    return float(number)


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits.

    The timeout of `run_program` (wall clock and the CPU time of the whole run, timing.py) is
    the primary bound; `cpu_seconds` exceeds the 30 s code / 20 s math timeouts (docs/method.md,
    "Execution sandbox") so that it only stops runaway descendants. Per process (rlimits, each at most the hard limit
    the host gives the caller): `memory_mb` of address space, `cpu_seconds`, `file_size_mb` per file.
    Per run, where the host allows (`isolation().protections` says which are active):
    `memory_mb` is also the total of the run's whole process tree and `processes` its count of
    processes and threads (a cgroup; `processes` also binds as the slot uid's rlimit), and
    `disk_mb` the total of the files it writes (a size-limited tmpfs for its working directory,
    its pages charged to the same cgroup, whose memory limit is therefore memory_mb + disk_mb).
    Each is a positive int of at most MAX_LIMITS[name], else ValueError.
    """

    memory_mb: int = 1024
    cpu_seconds: int = 40
    file_size_mb: int = 64
    processes: int = 64
    output_bytes: int = 4 * 1024 * 1024
    disk_mb: int = 128

    def __post_init__(self) -> None:
        for name, most in MAX_LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= most:
                raise ValueError(f"Limits.{name} must be a positive int of at most {most}, got {value!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced; `error` is None on success, else a short reason agents may see.

    `infrastructure_failure`: the sandbox itself failed (no slot free in time, a supervisor that
    did not report, a machine that starved the run of CPU until its timeout); the result says
    nothing about the program and must not be scored as its failure. `duration` counts from the
    program's start: time spent waiting for a slot is not in it. `timed_out`: a limit of
    `timing.py` ended the run, `limit` says which ("wall" clock or "cpu" time, else None).
    `cpu_time`: the CPU seconds all the run's processes used, where cgroups measure it, else None.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    error: str | None
    truncated: bool = False
    infrastructure_failure: bool = False
    limit: str | None = None
    cpu_time: float | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
