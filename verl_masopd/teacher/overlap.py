"""Teacher scoring and judging as episodes finish, while the rollout still plays the others.

Without the turn barrier (rollout.turn_barrier=false) the rollout manager hands every episode to
`on_episode_done` as soon as it is judged. `ScoringAsDone.add` is that hook: the episode joins a
queue, and one worker task on the rollout's event loop scores what waits as one batch (its PAC
attributions, its teacher passes, its judge calls: the trainer's `score` function), then the
episodes that finished meanwhile as the next batch, until the queue is empty. The scorers run
beside the generation: a server scorer's requests are coroutines, the engine scorer's forward
passes run in a thread (`teacher/engine_scorer.py`). `drain` adds what the hook never saw (tree
sampling has no hook) and waits for the rest, so the step waits only for what is left:

    step wait = scoring of the batches still queued or running when the last episode ends

Every response is scored from its own record, whatever batch it is in, so the scores are those of
one pass over all episodes up to the scorers' floating-point batch effects; the stats of the
batches add up (`Scored.merge`). With the barrier on, the trainer scores after the rollout, in one
batch, as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from verl_masopd.rollout.records import EpisodeResult
from verl_masopd.teacher.attribution import Attributions
from verl_masopd.teacher.judging import JudgeStats
from verl_masopd.teacher.scoring import ScoringStats


@dataclass
class Scored:
    """What scoring a batch of episodes reports: the teacher's stats and attributions, the judge's
    stats (None where the run has no teacher or no judge)."""

    teacher: ScoringStats | None = None
    attributions: Attributions | None = None
    judge: JudgeStats | None = None

    def merge(self, other: Scored) -> Scored:
        """The report of both batches together."""
        return Scored(
            _merged(self.teacher, other.teacher, ScoringStats.merge),
            _merged(self.attributions, other.attributions, Attributions.merge),
            _merged(self.judge, other.judge, JudgeStats.merge),
        )


def _merged(a, b, merge):
    return b if a is None else a if b is None else merge(a, b)


class ScoringAsDone:
    """Scores finished episodes in batches with `score` while the rollout goes on (module docstring).

    Use on the rollout's event loop: `add` is the rollout's `on_episode_done`; `await drain(results)`
    after the rollout returns the merged report. `batches` lists each batch's episode count,
    `busy_s` the seconds the worker spent scoring."""

    def __init__(self, score: Callable[[list[EpisodeResult]], Awaitable[Scored]]):
        self._score = score
        self._waiting: list[EpisodeResult] = []
        self._seen: set[str] = set()
        self._workers: list[asyncio.Task] = []
        self.report = Scored()
        self.batches: list[int] = []
        self.busy_s = 0.0

    def add(self, result: EpisodeResult) -> None:
        """Queue a finished episode; start the worker when none is running."""
        if result.episode_id in self._seen:
            return
        self._seen.add(result.episode_id)
        self._waiting.append(result)
        if not self._workers or self._workers[-1].done():
            self._workers.append(asyncio.get_running_loop().create_task(self._work()))

    async def _work(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            start = time.perf_counter()
            self.report = self.report.merge(await self._score(batch))
            self.busy_s += time.perf_counter() - start
            self.batches.append(len(batch))

    async def drain(self, results: Sequence[EpisodeResult]) -> Scored:
        """Queue the episodes of `results` not yet added, wait until every queued one is scored and
        return the merged report; a scoring error raises here."""
        for result in results:
            self.add(result)
        await asyncio.gather(*self._workers)
        return self.report
