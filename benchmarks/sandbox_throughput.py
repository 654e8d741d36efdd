"""Sandbox throughput for a trivial program: sequential and pooled executions per second, next to
the cost of a bare interpreter start-up measured in the same run; and how long runs that time
out take under load (spinning programs and fork bombs, more runs than cores) against their timeout.

On a shared machine wall-clock rates fall with its load; the CPU time all processes of the runs
take (this runner, the zygote, supervisors, run inits, programs: a cgroup v1 cpuacct group this
process and its descendants join, where the host has one) gives the rate 2 free cores would reach.

Usage: python benchmarks/sandbox_throughput.py [--runs N] [--name NAME]
Writes benchmarks/results/NAME.json (default sandbox_throughput) and prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from results_file import save_result

from verl_masopd.sandbox import isolation, run_many, run_program, zygote

TRIVIAL = "print(1)"
SPIN = "while True:\n    pass\n"
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"


def per_second(count: int, seconds: float) -> float:
    return round(count / seconds, 1)


def bare_startup(runs: int) -> dict:
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    seconds = time.perf_counter() - start
    return {"runs": runs, "ms_per_start": round(1000 * seconds / runs, 2), "starts_per_s": per_second(runs, seconds)}


def sequential(runs: int) -> dict:
    start = time.perf_counter()
    results = [run_program(TRIVIAL) for _ in range(runs)]
    seconds = time.perf_counter() - start
    assert all(r.ok and r.stdout == "1\n" for r in results), "a trivial run failed"
    return {"runs": runs, "ms_per_run": round(1000 * seconds / runs, 2), "runs_per_s": per_second(runs, seconds)}


def pooled(runs: int, workers: int) -> dict:
    start = time.perf_counter()
    results = run_many([(TRIVIAL, "")] * runs, max_workers=workers)
    seconds = time.perf_counter() - start
    assert all(r.ok and r.stdout == "1\n" for r in results), "a trivial run failed"
    return {"workers": workers, "runs": runs, "runs_per_s": per_second(runs, seconds)}


def timeouts_under_load(timeout: float, spinners: int, bombs: int) -> dict:
    """All at once: `spinners` spinning programs and `bombs` fork bombs, each with `timeout`;
    how far past it the timed-out ones came back, and what the others came back as."""
    jobs = [(SPIN, "")] * spinners + [(FORK_BOMB, "")] * bombs
    results = run_many(jobs, timeout=timeout, max_workers=len(jobs))
    timed_out = [r for r in results if r.timed_out]
    over = sorted(r.duration - timeout for r in timed_out)
    return {
        "timeout_s": timeout,
        "spinners": spinners,
        "fork_bombs": bombs,
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "timed_out": len(timed_out),
        "other_outcomes": sorted(r.error for r in results if not r.timed_out),
        "seconds_past_timeout": {
            "median": round(over[len(over) // 2], 3),
            "max": round(over[-1], 3),
            "max_ratio_to_timeout": round(max(r.duration for r in timed_out) / timeout, 3),
        },
    }


CPUACCT = "/sys/fs/cgroup/cpuacct"


@contextlib.contextmanager
def cpu_meter():
    """Put this process (and so the zygote it starts and every run, whose slots' cpuacct cgroups
    the sandbox then makes inside it) in a fresh cpuacct cgroup; yields a function reading its CPU
    nanoseconds, or None where there is no such hierarchy. Afterwards the sandbox forgets it."""
    group = os.path.join(CPUACCT, f"sandbox-benchmark-{os.getpid()}")
    try:
        os.mkdir(group)
        with open(os.path.join(group, "cgroup.procs"), "w") as handle:
            handle.write("0")
    except OSError:
        yield None
        return
    try:
        yield lambda: int(Path(group, "cpuacct.usage").read_text())
    finally:
        zygote.close()
        with open(os.path.join(CPUACCT, "cgroup.procs"), "w") as handle:
            handle.write("0")
        for slot in Path(group).glob("verl-masopd-sandbox-*"):
            slot.rmdir()
        os.rmdir(group)
        isolation.cache_clear()


def cpu_per_run(usage, runs: int) -> dict | None:
    """CPU milliseconds per trivial run, sequential and pooled (4 workers), and the rate they allow on 2 cores."""
    if usage is None:
        return None
    before = usage()
    assert all(run_program(TRIVIAL).ok for _ in range(runs)), "a trivial run failed"
    between = usage()
    assert all(r.ok for r in run_many([(TRIVIAL, "")] * runs, max_workers=4)), "a trivial run failed"
    after = usage()
    sequential_ms, pooled_ms = (between - before) / runs / 1e6, (after - between) / runs / 1e6
    return {
        "runs": runs,
        "cpu_ms_per_run_sequential": round(sequential_ms, 2),
        "cpu_ms_per_run_pooled": round(pooled_ms, 2),
        "runs_per_s_on_2_free_cores": round(2000 / pooled_ms, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--name", default="sandbox_throughput")
    args = parser.parse_args()
    with cpu_meter() as usage:
        run_program(TRIVIAL)
        cpu = cpu_per_run(usage, args.runs)
    setup = isolation()
    report = {
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "euid": os.geteuid(),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "isolation": {"protections": setup.protections, "warnings": setup.warnings},
        "bare_python_startup": bare_startup(args.runs),
        "sequential": sequential(args.runs),
        "pool": [pooled(args.runs, workers) for workers in (2, 4, 8)],
        "target_runs_per_s": 100,
        "cpu": cpu,
        "timeouts_under_load": timeouts_under_load(2.0, spinners=8, bombs=2),
    }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
