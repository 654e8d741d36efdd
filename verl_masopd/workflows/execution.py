"""Running candidate programs for a problem: call-based wrapping, one concurrent batch per step,
outcome descriptions (outputs are compared with `verl_masopd.verify.outputs_agree`)."""

from __future__ import annotations

import warnings

from verl_masopd.sandbox import ExecResult, run_many, wrap_call_based
from verl_masopd.workflows.parsing import shown

MAX_FAILURE_CHARS = 500


class JobBatch:
    """Programs to run together: `add` returns a job's index, `run` executes every distinct
    (program, stdin, copy) job once, concurrently, and returns one result per added job.
    `copy` numbers repeated runs of one program on one input (a determinism check)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, str, int]] = []

    def add(self, program: str, stdin: str, copy: int = 0) -> int:
        self.jobs.append((program, stdin, copy))
        return len(self.jobs) - 1

    def run(self, timeout: float) -> list[ExecResult]:
        unique = list(dict.fromkeys(self.jobs))
        if not unique:
            return []
        results = run_many([(program, stdin) for program, stdin, _ in unique], timeout=timeout)
        done = dict(zip(unique, results, strict=True))
        return [done[job] for job in self.jobs]


def runnable(code: str, fn_name: str | None) -> str:
    """The program to execute for `code`: wrapped to read a JSON argument list for call-based problems."""
    return wrap_call_based(code, fn_name) if fn_name else code


def failure(result: ExecResult) -> str | None:
    """Why a run did not finish cleanly (the sandbox's error string agents are shown), or None."""
    if result.error:
        return shown(result.error, MAX_FAILURE_CHARS)
    return None if result.ok else f"exit code {result.exit_code}"


def build_error(code: str) -> str | None:
    """Why `code` does not compile as Python, or None (the Coder's build check of D.4)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<program>", "exec")
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def output_signature(result: ExecResult) -> str | None:
    """A run's output with whitespace normalised, None when the run failed (for comparing programs)."""
    return " ".join(result.stdout.split()) if failure(result) is None else None
