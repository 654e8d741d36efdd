"""Sandbox throughput for a trivial program: sequential and pooled executions per second, next to
the cost of a bare interpreter start-up measured in the same run.

Usage: python benchmarks/sandbox_throughput.py [--runs N]
Writes benchmarks/results/sandbox_throughput.json and prints it.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

from results_file import save_result

from verl_masopd.sandbox import isolation, run_many, run_program

TRIVIAL = "print(1)"


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    run_program(TRIVIAL)
    setup = isolation()
    report = {
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "euid": os.geteuid(),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "isolation": {"unprivileged_uid": setup.privileged, "namespaces": setup.namespaces, "warnings": setup.warnings},
        "bare_python_startup": bare_startup(args.runs),
        "sequential": sequential(args.runs),
        "pool": [pooled(args.runs, workers) for workers in (2, 4, 8)],
        "target_runs_per_s": 100,
    }
    save_result("sandbox_throughput", report)


if __name__ == "__main__":
    main()
