"""Turning a finished process into the short error string of an ExecResult."""

from __future__ import annotations

import re
import signal

_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
_LINE_NUMBER = re.compile(r'File "main\.py", line (\d+)')
_MAX_REASON_CHARS = 300

_SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu time limit exceeded",
    signal.SIGXFSZ: "file size limit exceeded",
}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:_MAX_REASON_CHARS] if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_failure(
    exit_code: int | None,
    stderr: str,
    limit: str | None,
    truncated: bool,
    timeout: float,
    output_bytes: int,
    memory_killed: bool = False,
) -> str | None:
    """None for a clean exit, else the reason: timeout, truncation, syntax, memory, signal or exit code.
    `limit`: the time limit that ended the run ("wall", "cpu" or None); `memory_killed`: the
    kernel killed a process of the run for the run's total memory."""
    if limit == "wall":
        return f"timeout after {timeout:.1f}s"
    if limit == "cpu":
        return f"timeout after {timeout:.1f}s of CPU time"
    if truncated:
        return f"output truncated at {output_bytes} bytes"
    if exit_code == 0:
        return None
    last = _last_line(stderr)
    if last.startswith(_SYNTAX_ERRORS):
        message = last.split(":", 1)[1].strip() if ":" in last else last
        line = _LINE_NUMBER.findall(stderr)
        return f"syntax error: {message}" + (f" (line {line[-1]})" if line else "")
    if last.startswith("MemoryError"):
        return "memory limit exceeded"
    if memory_killed:
        return "memory limit exceeded (the run's total)"
    if exit_code is None:
        return "not started"
    if exit_code < 0:
        return _SIGNAL_REASONS.get(-exit_code, f"killed by {_signal_name(-exit_code)}")
    return f"exit code {exit_code}: {last}" if last else f"exit code {exit_code}"


def starved_reason(cpu_time: float, timeout: float) -> str:
    """Why a run the machine starved of CPU (timing.py) says nothing about its program."""
    return f"sandbox failure: starved of CPU ({cpu_time:.2f}s of CPU time in its {timeout:.1f}s), machine overloaded"
