"""A run's two time limits and starvation (timing.py), run for real as root: the CPU time of all
its processes is measured and ends a run that keeps several cores busy before its wall clock
does; a run the machine is too busy to give its share ends at its wall clock as an
infrastructure failure, never as the program's timeout (nor, in the workflows, as a wrong
answer), while one that sleeps times out."""

import concurrent.futures
import os
import time

import pytest

from verl_masopd.sandbox import isolation, run_program
from verl_masopd.sandbox.isolation import SLOT_COUNT
from verl_masopd.sandbox.timing import STARVED_SHARE
from verl_masopd.workflows.base import Action, Agent
from verl_masopd.workflows.math import ToolUserEvidence, tool_user_evidence
from verl_masopd.workflows.problem import Problem

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or isolation().cgroups is None, reason="CPU time is measured per run by cgroups"
)

CORES = len(os.sched_getaffinity(0))
SPIN = "while True:\n    pass\n"


def test_cpu_time_counts_every_process_of_the_run():
    """Two processes of 0.3 s of CPU each: the run's CPU time is their sum; a sleeper's is nil."""
    work = (
        "import os, time\nchild = os.fork()\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n"
        "    pass\nif child:\n    os.waitpid(child, 0)\n"
    )
    busy = run_program(work, timeout=10.0)
    idle = run_program("import time\ntime.sleep(0.5)\n", timeout=10.0)
    assert busy.ok and idle.ok, (busy, idle)
    assert 0.6 <= busy.cpu_time < 0.6 + 0.3, busy
    assert idle.cpu_time < 0.1 <= 0.5 <= idle.duration, idle


@pytest.mark.skipif(CORES < 2, reason="a run can use more CPU time than wall clock only on several cores")
def test_a_run_keeping_several_cores_busy_ends_when_its_cpu_time_runs_out():
    """A process per core, spinning: its CPU time runs out before its wall clock, in about half
    its timeout on two free cores. Other load may leave it less than one core, and its wall
    clock runs out first: each try ends at the limit reached first; one of five ends at CPU."""
    code = f"import os\nfor _ in range({CORES - 1}):\n    if os.fork() == 0:\n        break\n{SPIN}"
    tries = []
    while len(tries) < 5 and not any(result.limit == "cpu" for result in tries):
        result = run_program(code, timeout=2.0)
        assert result.timed_out and not result.infrastructure_failure, result
        if result.limit == "cpu":
            assert result.error == "timeout after 2.0s of CPU time"
            assert 2.0 <= result.cpu_time and result.duration < 2.0, result
        else:
            assert result.limit == "wall" and 2.0 <= result.duration, result
        tries.append(result)
    assert tries[-1].limit == "cpu", tries


@pytest.mark.skipif(15 * CORES + 5 > SLOT_COUNT, reason="sized to overload a machine of at most 3 cores")
def test_runs_starved_by_an_overloaded_machine_are_infrastructure_failures():
    """15 spinning runs per core keep the machine busy while four spinning runs and a sleeping one
    start and end: each spinner gets a seventeenth of a core or so, under STARVED_SHARE, so it
    comes back as an infrastructure failure at its wall clock, by its timeout plus one second
    from its call. The sleeping run was not starved: it timed out."""
    timeout = 2.0
    load = [SPIN] * (15 * CORES)
    victims = [SPIN] * 4 + ["import time\ntime.sleep(60)\n"]

    def one(code: str, seconds: float):
        start = time.monotonic()
        result = run_program(code, timeout=seconds)
        return result, time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(len(load) + len(victims)) as pool:
        loaded = [pool.submit(one, code, 2 * timeout + 1.0) for code in load]
        time.sleep(0.5)
        *spinners, (sleeper, slept) = pool.map(one, victims, [timeout] * len(victims))
        assert not any(future.result()[0].ok for future in loaded)
    for result, seconds in spinners:
        assert result.infrastructure_failure and result.timed_out and result.limit == "wall", result
        assert result.exit_code is None and result.cpu_time < STARVED_SHARE * timeout, result
        assert result.error.startswith("sandbox failure: starved of CPU ("), result
        assert seconds <= timeout + 1.0
    assert sleeper.timed_out and sleeper.limit == "wall" and not sleeper.infrastructure_failure, sleeper
    assert sleeper.error == "timeout after 2.0s" and slept <= timeout + 1.0
    # the workflows record a starved run as lost, never as a wrong answer
    starved = spinners[0][0]
    problem = Problem(uid="forty", domain="math", statement="What is 8 times 5?", answer="40")
    evidence = tool_user_evidence(Action(Agent("tool_user_0", "tool_user", 0), "", {}, None), starved, problem, 100)
    assert evidence.correct is None and evidence.verdict is None
    assert not evidence.reward(ToolUserEvidence.WEIGHTS).mask
