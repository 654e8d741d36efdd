"""The bounded pool of math-verify worker processes: an answer that makes math-verify hang is cut
off at the deadline and its worker replaced; no more workers than the cap ever run, and callers
beyond it wait for a free worker within their timeout."""

import threading
import time

import pytest

from verl_masopd.verify import math_equal
from verl_masopd.verify.equivalence import ANSWER_CHECK_TIMEOUT_S, MAX_ANSWER_CHARS, WorkerPool

# sympy evaluates the tower 2^(2^65536) in one C call that math-verify's SIGALRM cannot interrupt.
HANGS = "2^{2^{2^{2^{2^{2}}}}}"


@pytest.fixture
def pool(children_running):
    """A pool of two, and a function listing its worker pids (not those of math_equal's pool)."""

    def workers() -> set[int]:
        return {child.pid for child in children_running("verl_masopd.verify.math_worker")}

    others = workers()
    pool = WorkerPool(2)
    yield pool, lambda: workers() - others
    pool.close()


def test_a_hanging_comparison_is_cut_off_and_its_worker_replaced(pool):
    pool, own_workers = pool
    assert pool.equal("1/2", "0.5", timeout=5.0)
    [first] = own_workers()
    started = time.monotonic()
    assert pool.equal(HANGS, "1", timeout=1.0) is False
    assert time.monotonic() - started < 1.0 + 1.0
    assert first not in own_workers()
    assert pool.equal("\\frac{3}{4}", "0.75", timeout=5.0)
    [second] = own_workers()
    assert second != first


def test_no_more_workers_than_the_cap_and_waiters_get_a_free_one(pool):
    pool, own_workers = pool
    peak = 0
    results = {}

    def compare(name, pred, timeout):
        results[name] = pool.equal(pred, "1", timeout=timeout)

    threads = [threading.Thread(target=compare, args=(f"hang{i}", HANGS, 2.0)) for i in range(2)]
    threads += [threading.Thread(target=compare, args=("waits", "3/3", 30.0))]
    threads += [threading.Thread(target=compare, args=("gives-up", "2/2", 0.3))]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, len(own_workers()))
        time.sleep(0.02)
    assert peak == 2
    assert results == {"hang0": False, "hang1": False, "waits": True, "gives-up": False}


def test_math_equal_survives_a_hanging_answer():
    assert math_equal(HANGS, "1", timeout=1.0) is False
    assert math_equal("2", "2.0", timeout=5.0) is True


def test_one_comparison_is_bounded_by_default():
    """An answer that makes math-verify hang costs at most the default bound (plus a worker's start)."""
    started = time.monotonic()
    assert math_equal("9^{9^{9^{9}}}", "40") is False
    assert time.monotonic() - started < ANSWER_CHECK_TIMEOUT_S + 1.5


def test_answers_over_the_length_cap_are_not_compared():
    """A huge answer (a program printing 4 MB on one line) is refused before math-verify sees it."""
    at_cap = "1" * MAX_ANSWER_CHARS
    assert math_equal(at_cap, at_cap) is True
    assert math_equal(at_cap + "1", at_cap + "1") is False
    assert math_equal("1" * 4_000_000, "40") is False


def test_pool_size_is_validated():
    with pytest.raises(ValueError, match="WorkerPool size"):
        WorkerPool(0)
