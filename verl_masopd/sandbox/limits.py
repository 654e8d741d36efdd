"""Resource limits and the outcome record of one sandboxed execution."""

from __future__ import annotations

from dataclasses import dataclass

STDERR_TAIL_BYTES = 8192


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits, applied as rlimits to the program and each of its processes.

    The wall-clock timeout of `run_program` is the primary bound; `cpu_seconds` exceeds the
    30 s code / 20 s math timeouts of METHOD.md §2 so that it only stops runaway descendants.
    `processes` counts processes and threads of the run's unprivileged uid.
    """

    memory_mb: int = 1024
    cpu_seconds: int = 40
    file_size_mb: int = 64
    processes: int = 64
    output_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "file_size_mb", "processes", "output_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced; `error` is None on success, else a short reason agents may see."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    error: str | None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
