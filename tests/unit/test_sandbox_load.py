"""The sandbox under concurrency and load, run for real as root and sized for 2 cores: a program's
timeout measures the program alone, waiting for a slot is bounded and reported as an
infrastructure failure, a lost supervisor is retried or reported as such and leaves nothing of
its run (zombies included) behind, an overloaded machine scores every program correctly, and
honest programs beside every kind of attack get their share of the CPU and come back in time."""

import concurrent.futures
import contextlib
import fcntl
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from verl_masopd.sandbox import Limits, run_many, run_program
from verl_masopd.sandbox.isolation import SLOT_COUNT, SLOT_UID_BASE, slot_lock_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="slots and containment are specified for root-run hosts")

SLOT_UIDS = range(SLOT_UID_BASE, SLOT_UID_BASE + SLOT_COUNT)
STARVED = "sandbox failure: starved of CPU"


@contextlib.contextmanager
def slots_held(count: int):
    """Hold `count` slots' locks as another process's runs would (taking, within 30 s, those
    another process on this host may be using now)."""
    held = {}
    deadline = time.monotonic() + 30.0
    try:
        while len(held) < count and time.monotonic() < deadline:
            for uid in SLOT_UIDS:
                if uid in held or len(held) == count:
                    continue
                handle = open(Path(slot_lock_dir()) / str(uid), "a")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                held[uid] = handle
            time.sleep(0.01)
        assert len(held) == count, "other processes kept sandbox slots for 30 s"
        yield
    finally:
        for handle in held.values():
            handle.close()


def run_tree(uid: int) -> list[psutil.Process]:
    """Every process of `uid`, zombies included (a zombie still counts against the uid's process limit)."""
    return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]


def test_waiting_for_a_slot_is_not_counted_in_the_programs_timeout():
    """Four free slots, eight programs of 1.0 s under a 1.8 s timeout: the four that wait for a
    slot still have their whole timeout."""
    jobs = [("import time\ntime.sleep(1.0)\nprint('done')\n", "")] * 8
    with slots_held(SLOT_COUNT - 4):
        results = run_many(jobs, timeout=1.8, max_workers=8)
    assert [r.stdout for r in results] == ["done\n"] * 8, results
    assert all(r.ok and r.duration < 1.8 for r in results), results


def test_no_free_slot_is_an_infrastructure_failure_not_a_timeout():
    with slots_held(SLOT_COUNT):
        start = time.monotonic()
        result = run_program("print(1)", timeout=5.0, slot_wait=0.5)
        waited = time.monotonic() - start
    assert result.infrastructure_failure and not result.timed_out and result.exit_code is None
    assert result.error == "sandbox failure: no sandbox slot free within 0.5s"
    assert 0.5 <= waited < 2.0


def _kill_supervisors(limit: int, uids: set[int], stop: threading.Event) -> None:
    """SIGKILL up to `limit` run supervisors of this process's zygote, each once its program
    runs, recording the programs' uids."""
    zygote = psutil.Process(sys.modules["verl_masopd.sandbox.zygote"]._zygote.process.pid)
    killed = 0
    while killed < limit and not stop.is_set():
        for supervisor in zygote.children():
            with contextlib.suppress(psutil.NoSuchProcess):
                programs = {p.uids().real for p in supervisor.children(recursive=True)} & set(SLOT_UIDS)
                if programs and killed < limit:
                    uids.update(programs)
                    supervisor.kill()
                    killed += 1
        time.sleep(0.02)


@pytest.mark.parametrize("kills", [1, 2], ids=["retried", "reported"])
def test_a_lost_supervisor_is_retried_then_reported_and_leaves_nothing(kills):
    """A supervisor killed mid-run (as an overloaded host may lose one) costs its run a retry;
    lost twice, the run is an infrastructure failure, never the program's. Either way every
    process of a lost run, zombies included, is gone when the result comes back."""
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\ntime.sleep(0.6)\nprint('done')\n"
    run_program("print(1)")  # the zygote exists before the killer looks for it
    uids: set[int] = set()
    stop = threading.Event()
    killer = threading.Thread(target=_kill_supervisors, args=(kills, uids, stop))
    killer.start()
    try:
        result = run_program(code, timeout=5.0)
    finally:
        stop.set()
        killer.join()
    if kills == 1:
        assert result.ok and result.stdout == "done\n" and not result.infrastructure_failure, result
    else:
        assert result.infrastructure_failure and not result.timed_out and result.exit_code is None, result
        assert result.error.startswith("sandbox failure: "), result
    assert len(uids) == kills
    assert all(run_tree(uid) == [] for uid in uids)


def test_overloaded_host_scores_every_program_correctly():
    """Spinning programs and fork bombs (of 16 processes each) beside correct programs, many more
    processes than cores: every correct program passes, the others time out (or, if the machine
    starves them of CPU, timing.py, come back as that infrastructure failure), no supervisor is
    lost, and nothing of any run is left."""
    spin = ("while True:\n    pass\n", "")
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "")
    sums = [(f"import sys\nprint(sum(map(int, sys.stdin.read().split())) + {i})\n", "1 2 3") for i in range(12)]
    jobs = [spin] * 4 + [bomb] * 2 + sums
    start = time.monotonic()
    results = run_many(jobs, timeout=3.0, limits=Limits(processes=16), max_workers=len(jobs))
    elapsed = time.monotonic() - start
    assert [r.stdout for r in results[6:]] == [f"{6 + i}\n" for i in range(12)], results[6:]
    assert all(r.ok for r in results[6:])
    assert all(r.timed_out for r in results[:6]), results[:6]
    assert all(not r.infrastructure_failure or r.error.startswith(STARVED) for r in results[:6]), results[:6]
    assert elapsed < 20.0
    left = {uid: _left_behind(uid) for uid in SLOT_UIDS}
    assert not any(left.values()), left


def _left_behind(uid: int) -> list[psutil.Process]:
    """Processes of `uid` while its slot is free (a slot another process holds now runs its own program)."""
    with open(Path(slot_lock_dir()) / str(uid), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []
        return run_tree(uid)


HONEST = "total = 0\nfor i in range(1_500_000):\n    total += i * i % 7\nprint(total)\n"  # about 0.2 s of CPU
ATTACKS = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "busy threads": "import threading\ndef spin():\n    while True:\n        pass\n"
    "for _ in range(8):\n    threading.Thread(target=spin).start()\n",
    "busy processes": "import os\nfor _ in range(7):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n",
    "memory hog": "blocks = []\nwhile True:\n    try:\n        blocks.append(bytearray(64 << 20))\n"
    "    except MemoryError:\n        break\nwhile True:\n    pass\n",
}


def _returns(jobs: list[str], timeout: float) -> list[tuple]:
    """Run every job at once, each on its own thread: (result, seconds from the call to its return)."""
    start = time.monotonic()

    def one(code: str):
        result = run_program(code, timeout=timeout)
        return result, time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(one, jobs))


def test_honest_runs_beside_every_attack_get_their_share_and_every_run_returns_in_time():
    """The audit's load: 16 honest CPU-bound programs (0.2 s of CPU each, 4 s timeouts) started
    at once beside a fork bomb, busy threads, busy processes and a memory hog, 20 runs at once.
    The CPU is shared per run (cgroups.py), so no honest program is starved into a timeout: each
    passes or, only if the machine could not give it its share, comes back as an infrastructure
    failure; most pass. Every run, the attacks included, returns by its timeout plus one second
    from the call."""
    timeout = 4.0
    jobs = list(ATTACKS.values()) + [HONEST] * 16
    returned = _returns(jobs, timeout)
    attacks, honest = returned[: len(ATTACKS)], returned[len(ATTACKS) :]
    expected = f"{sum(i * i % 7 for i in range(1_500_000))}\n"
    passed = [r for r, _ in honest if r.ok and r.stdout == expected]
    starved = [r for r, _ in honest if r.infrastructure_failure and r.error.startswith(STARVED)]
    assert len(passed) + len(starved) == len(honest), [r for r, _ in honest]
    assert len(passed) >= 12, [r for r, _ in honest]
    assert not any(r.ok for r, _ in attacks), attacks
    latest = max(seconds for _, seconds in returned)
    assert latest <= timeout + 1.0, sorted(seconds for _, seconds in returned)
