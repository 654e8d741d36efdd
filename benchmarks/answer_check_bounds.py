"""What checking an untrusted answer costs: a 4 MB answer line, an exponent tower that makes
math-verify hang, and a fresh worker's first ordinary comparison, with and without the length
cap, measured side by side in one run; a fresh worker's first comparison within a 0.5 s bound
(its start-up and warm-up are not counted).

Usage: python benchmarks/answer_check_bounds.py
Writes benchmarks/results/answer_check_bounds.json and prints it.
"""

from __future__ import annotations

import os
import time

from results_file import save_result

from verl_masopd.verify import math_equal
from verl_masopd.verify.equivalence import ANSWER_CHECK_TIMEOUT_S, MAX_ANSWER_CHARS, WorkerPool

HUGE = "1" * 4_000_000
TOWER = "9^{9^{9^{9}}}"


def seconds(call) -> tuple[float, object]:
    start = time.perf_counter()
    value = call()
    return round(time.perf_counter() - start, 3), value


def main() -> None:
    uncapped = WorkerPool(1)
    seconds(lambda: uncapped.equal("1", "1", 30.0))  # start its worker
    huge_uncapped, _ = seconds(lambda: uncapped.equal(HUGE, "40", ANSWER_CHECK_TIMEOUT_S))
    huge_capped, verdict = seconds(lambda: math_equal(HUGE, "40"))
    tower, tower_verdict = seconds(lambda: math_equal(TOWER, "40"))
    uncapped.close()

    fresh = WorkerPool(1)
    first, first_verdict = seconds(lambda: fresh.equal("-2,0,2", "-2, 0, 2", 0.5))
    second, _ = seconds(lambda: fresh.equal("\\frac{1}{2}", "0.5", 0.5))
    fresh.close()
    save_result(
        "answer_check_bounds",
        {
            "machine": f"{os.cpu_count()} cores, shared with other jobs (load {os.getloadavg()[0]:.1f})",
            "bound_s": ANSWER_CHECK_TIMEOUT_S,
            "max_answer_chars": MAX_ANSWER_CHARS,
            "huge_answer_4mb_s": {"without_length_cap": huge_uncapped, "with_length_cap": huge_capped},
            "huge_answer_verdict": verdict,
            "tower_9^9^9^9_s": tower,
            "tower_verdict": tower_verdict,
            "fresh_worker_within_0.5s": {
                "first_call_s (start-up and warm-up not counted in the bound)": first,
                "first_verdict": first_verdict,
                "second_call_s": second,
            },
        },
    )


if __name__ == "__main__":
    main()
