"""Resource limits and the outcome record of one sandboxed execution."""

from __future__ import annotations

from dataclasses import dataclass

STDERR_TAIL_BYTES = 8192


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits.

    The wall-clock timeout of `run_program` is the primary bound; `cpu_seconds` exceeds the
    30 s code / 20 s math timeouts of METHOD.md §2 so that it only stops runaway descendants.
    Per process (rlimits): `memory_mb` of address space, `cpu_seconds`, `file_size_mb` per file.
    Per run, where the host allows (`isolation().protections` says which are active):
    `memory_mb` is also the total of the run's whole process tree and `processes` its count of
    processes and threads (a cgroup; `processes` also binds as the slot uid's rlimit), and
    `disk_mb` the total of the files it writes (a size-limited tmpfs for its working directory,
    its pages charged to the same cgroup, whose memory limit is therefore memory_mb + disk_mb).
    """

    memory_mb: int = 1024
    cpu_seconds: int = 40
    file_size_mb: int = 64
    processes: int = 64
    output_bytes: int = 4 * 1024 * 1024
    disk_mb: int = 128

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "file_size_mb", "processes", "output_bytes", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced; `error` is None on success, else a short reason agents may see.

    `infrastructure_failure`: the sandbox itself failed (no slot free in time, a supervisor that
    did not report); the result says nothing about the program and must not be scored as its
    failure. `duration` counts from the program's start: time spent waiting for a slot is not in it.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    error: str | None
    truncated: bool = False
    infrastructure_failure: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
