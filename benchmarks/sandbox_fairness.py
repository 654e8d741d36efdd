"""Honest programs beside attacks on a shared machine: whether any times out falsely, and how long
after the call the runs come back, against their timeout plus one second (issue 23's audit).

Each repetition starts every run at once, each on its own thread: 16 honest CPU-bound programs
(about 0.2 s of CPU, 0.3 s alone) beside the attacks of a scenario, all under a 3 s timeout.
"audit": a fork bomb, busy threads, busy processes and a memory hog (tests/unit/test_sandbox_load.py);
"every attack": eleven attack runs (two fork bombs, three each of the others). A false timeout is
an honest run that came back as its program's timeout; one the machine starved of CPU comes back
as an infrastructure failure instead (verl_masopd/sandbox/timing.py). It uses only run_program, so
that it measures the sandbox before this change as well (`PYTHONPATH=<old checkout>`).

Usage: python benchmarks/sandbox_fairness.py [--repeats N] [--name NAME]
Writes benchmarks/results/NAME.json (default sandbox_fairness) and prints it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from results_file import save_result

from verl_masopd.sandbox import isolation, run_program

TIMEOUT_S = 3.0
HONEST_RUNS = 16
HONEST = "total = 0\nfor i in range(1_500_000):\n    total += i * i % 7\nprint(total)\n"
EXPECTED = f"{sum(i * i % 7 for i in range(1_500_000))}\n"
ATTACKS = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "busy threads": "import threading\ndef spin():\n    while True:\n        pass\n"
    "for _ in range(8):\n    threading.Thread(target=spin).start()\n",
    "busy processes": "import os\nfor _ in range(7):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n",
    "memory hog": "blocks = []\nwhile True:\n    try:\n        blocks.append(bytearray(64 << 20))\n"
    "    except MemoryError:\n        break\nwhile True:\n    pass\n",
}
SCENARIOS = {
    "audit": list(ATTACKS),
    "every attack": ["fork bomb"] * 2 + ["busy threads", "busy processes", "memory hog"] * 3,
}


def machine_cpu_seconds() -> float:
    """CPU time the whole machine has spent busy (not idle or waiting for I/O), from /proc/stat."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def outcome(result) -> str:
    if result.ok:
        return "ok"
    if result.infrastructure_failure:
        return "infrastructure failure: " + result.error.split("(")[0].strip()
    return result.error


def repetition(attacks: list[str]) -> dict:
    """Every run at once; what came back and when, seconds from the call."""
    jobs = [ATTACKS[name] for name in attacks] + [HONEST] * HONEST_RUNS
    start = time.monotonic()
    busy = machine_cpu_seconds()

    def one(code: str):
        result = run_program(code, timeout=TIMEOUT_S)
        return result, time.monotonic() - start

    with ThreadPoolExecutor(len(jobs)) as pool:
        returned = list(pool.map(one, jobs))
    machine = machine_cpu_seconds() - busy
    honest = [r for r, _ in returned[len(attacks) :]]
    cpu = [getattr(r, "cpu_time", None) for r, _ in returned]
    return {
        "false_timeouts": sum(r.timed_out and not r.infrastructure_failure for r in honest),
        "honest_passed": sum(r.ok and r.stdout == EXPECTED for r in honest),
        "honest_outcomes": dict(Counter(map(outcome, honest))),
        "attack_outcomes": dict(Counter(outcome(r) for r, _ in returned[: len(attacks)])),
        "latest_return_after_timeout_s": round(max(seconds for _, seconds in returned) - TIMEOUT_S, 3),
        "runs_back_later_than_timeout_plus_1s": sum(seconds > TIMEOUT_S + 1.0 for _, seconds in returned),
        "cpu_s_of_the_runs": None if None in cpu else round(sum(cpu), 2),
        "cpu_s_of_the_machine": round(machine, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }


def scenario(attacks: list[str], repeats: int) -> dict:
    runs = [repetition(attacks) for _ in range(repeats)]
    return {
        "attacks": dict(Counter(attacks)),
        "honest_runs": HONEST_RUNS,
        "repeats": repeats,
        "false_timeouts": sum(r["false_timeouts"] for r in runs),
        "honest_runs_total": HONEST_RUNS * repeats,
        "honest_passed": sum(r["honest_passed"] for r in runs),
        "repeats_with_a_false_timeout": sum(r["false_timeouts"] > 0 for r in runs),
        "latest_return_after_timeout_s": max(r["latest_return_after_timeout_s"] for r in runs),
        "runs_back_later_than_timeout_plus_1s": sum(r["runs_back_later_than_timeout_plus_1s"] for r in runs),
        "each": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--name", default="sandbox_fairness")
    args = parser.parse_args()
    assert run_program("print(1)").ok, "the sandbox does not run"  # its start-up is not measured
    setup = isolation()
    report = {
        "host": {"cpus": os.cpu_count(), "euid": os.geteuid(), "load_average_1m_at_start": os.getloadavg()[0]},
        "isolation": {"protections": setup.protections, "warnings": setup.warnings},
        "timeout_s": TIMEOUT_S,
        "scenarios": {name: scenario(attacks, args.repeats) for name, attacks in SCENARIOS.items()},
    }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
