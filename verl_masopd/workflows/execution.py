"""Running candidate programs for a problem: call-based wrapping, one concurrent batch per step,
outcome descriptions (outputs are compared with `verl_masopd.verify.outputs_agree`)."""

from __future__ import annotations

import warnings

from verl_masopd.sandbox import ExecResult, run_many, wrap_call_based
from verl_masopd.verify import DEFAULT_FLOAT_TOL, outputs_agree
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


def finished_cleanly(result: ExecResult) -> bool:
    """Whether a run produced an output: it exited with status 0 within its timeout and its output
    was not cut. A run that crashed, timed out or exited non-zero produced no answer, whatever it
    printed before (docs/method.md, "Decisions on points the sources leave open")."""
    return result.exit_code == 0 and not result.timed_out and not result.truncated


def program_output(result: ExecResult) -> str | None:
    """What the run printed when it finished cleanly, else None (the only way workflows read stdout
    as an answer, a result or a signature)."""
    return result.stdout if finished_cleanly(result) else None


def failure(result: ExecResult) -> str | None:
    """Why a run did not finish cleanly (the sandbox's error string agents are shown), or None."""
    if finished_cleanly(result):
        return None
    return shown(result.error, MAX_FAILURE_CHARS) if result.error else f"exit code {result.exit_code}"


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


def run_passes(
    result: ExecResult, expected: str, fn_name: str | None, float_tol: float | None = DEFAULT_FLOAT_TOL
) -> bool:
    """Whether a run finished cleanly and printed the expected output (`outputs_agree`)."""
    output = program_output(result)
    return output is not None and outputs_agree(output, expected, fn_name, float_tol)


def output_signature(result: ExecResult) -> str | None:
    """A run's output with whitespace normalised, None when the run failed (for comparing programs)."""
    output = program_output(result)
    return None if output is None else " ".join(output.split())
