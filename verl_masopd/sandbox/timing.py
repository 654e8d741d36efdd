"""The time limits of one run, and when running out of time is the machine's fault, not the program's.

A run has `timeout` seconds of wall clock from its program's start and, where cgroups measure
it, `timeout` seconds of CPU time, all its processes and threads together (the judges' rule: a
program keeping several cores busy uses its time up sooner); whichever runs out first ends the
run (ExecResult.limit "wall" or "cpu"). The wall clock bounds how long a call takes, so it is
not stretched, but for one case: a run whose every process has ended or is ending when its wall
clock runs out finished in time, and its clock waits up to ENDING_GRACE_S more for their exit
and the supervisor's report (a busy machine delays both), so that its outcome is its own.

Starvation: a run whose wall clock ran out while it wanted a CPU (a task of it running, waiting
for a CPU or exiting), having had less than STARVED_SHARE of one CPU over its timeout, was
starved: the machine, overloaded, not the program, ran out of time, and the run is an
infrastructure failure, never the program's timeout. The slots' equal CPU weights (cgroups.py)
give every run its share of the machine whatever its processes do, so a run gets less than that
only while the machine runs more than 1 / STARVED_SHARE ready runs or other processes per core;
a program that needs at most STARVED_SHARE of its timeout in CPU time therefore never times out
for want of a CPU. A run that slept or waited (for input, on a lock) until its wall clock ran
out timed out, whatever its CPU time.
"""

from __future__ import annotations

import math
import os

from verl_masopd.sandbox.cgroups import Cgroups

STARVED_SHARE = 0.25
ENDING_GRACE_S = 0.5
_MIN_CHECK_S = 0.01


class RunClock:
    """One run's limits: made before the run starts (its slot's CPU time so far is the baseline),
    started when its program starts, asked while the run lasts which limit it has reached."""

    def __init__(self, timeout: float, cgroups: Cgroups | None, uid: int | None):
        self.timeout = timeout
        self._cgroups = cgroups
        self._uid = uid
        self._baseline = cgroups.cpu_seconds(uid) if cgroups else 0.0
        self._cpus = len(os.sched_getaffinity(0))
        self.deadline = self._next_check = math.inf
        self._ending = False

    def start(self, now: float) -> None:
        self.deadline = now + self.timeout
        if self._cgroups:
            self._next_check = now

    def cpu_time(self) -> float | None:
        """CPU seconds the run's processes have used so far, None where nothing measures them."""
        return self._cgroups.cpu_seconds(self._uid) - self._baseline if self._cgroups else None

    def limit(self, now: float) -> str | None:
        """The limit reached by `now`: "wall" once the wall clock has run out (for a run ending
        then, ENDING_GRACE_S later), "cpu" once the CPU time has, else None. The CPU time is read
        only when it may have run out: not before its remainder divided by the cores the run may
        use has passed since the last reading."""
        if now >= self.deadline:
            if self._ending or not self._cgroups or not all(exiting for _, exiting in self._tasks()):
                return "wall"
            self._ending = True
            self.deadline = now + ENDING_GRACE_S
        if now >= self._next_check:
            left = self.timeout - self.cpu_time()
            if left <= 0:
                return "cpu"
            self._next_check = now + max(left / self._cpus, _MIN_CHECK_S)
        return None

    def wait(self, now: float) -> float:
        """Seconds until `limit` may have a new answer."""
        return max(min(self.deadline, self._next_check) - now, 0.0)

    def starved(self, cpu_time: float | None) -> bool:
        """Whether a run whose wall clock ran out, having used `cpu_time`, was starved (module doc)."""
        if cpu_time is None or cpu_time >= STARVED_SHARE * self.timeout:
            return False
        return any(state == "R" or exiting for state, exiting in self._tasks())

    def _tasks(self) -> list[tuple[str, bool]]:
        return self._cgroups.task_states(self._uid)
