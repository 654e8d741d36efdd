"""The training problem stream: parquet rows → `Problem`s, served N at a time in a seeded order.

Epoch e visits every problem once in the order perm_e = permutation(seed, e), a function of the
seed and the epoch alone (numpy's PCG64 seeded with [seed, e]). Each batch is the next N problems
of the current epoch; a remainder shorter than N is skipped and the next epoch begins (verl's
drop_last). The stream's position (epoch, index) is all a checkpoint needs: a resumed stream
restored from it yields exactly the batches the uninterrupted one would have.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow.parquet as pq

from verl_masopd.workflows.problem import Problem


@dataclass(frozen=True)
class DataPosition:
    """`index` problems of epoch `epoch`'s order have been served."""

    epoch: int = 0
    index: int = 0


def read_problems(files: Sequence[str], domain: str | None = None) -> list[Problem]:
    """Every row of the parquet `files` as a `Problem`, in file order.

    A bad row, a row of another `domain` or a problem id seen twice raises ValueError naming the
    file and row (GRPO-style groups are keyed by the problem id, so ids must be unique).
    """
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"data file not found: {path}")
        for row_number, row in enumerate(pq.read_table(path).to_pylist()):
            where = f"{path}, row {row_number}"
            try:
                problem = Problem.from_row(row)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            if domain is not None and problem.domain != domain:
                raise ValueError(f"{where}: a {problem.domain} problem, but the run's workflow.domain is {domain}")
            if problem.uid in seen:
                raise ValueError(f"{where}: problem id {problem.uid!r} already used at {seen[problem.uid]}")
            seen[problem.uid] = where
            problems.append(problem)
    return problems


def epoch_order(num_problems: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """perm_e: the order in which epoch `epoch` visits the problems."""
    if not shuffle:
        return np.arange(num_problems)
    return np.random.default_rng([seed, epoch]).permutation(num_problems)


class ProblemStream:
    """Batches of `batch_size` problems, epoch after epoch, in the seeded order of `epoch_order`."""

    def __init__(self, problems: Sequence[Problem], batch_size: int, seed: int, shuffle: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        if len(problems) < batch_size:
            raise ValueError(
                f"{len(problems)} training problems cannot fill one batch of {batch_size} (data.train_batch_size)"
            )
        self.problems = list(problems)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.position = DataPosition()
        self._order = epoch_order(len(self.problems), seed, 0, shuffle)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.problems) // self.batch_size

    def next_batch(self) -> list[Problem]:
        epoch, index = self.position.epoch, self.position.index
        if index + self.batch_size > len(self.problems):
            epoch, index = epoch + 1, 0
            self._order = epoch_order(len(self.problems), self.seed, epoch, self.shuffle)
        batch = [self.problems[i] for i in self._order[index : index + self.batch_size]]
        self.position = DataPosition(epoch, index + self.batch_size)
        return batch

    def state_dict(self) -> dict:
        """The position plus what must match for it to mean the same order after a restore."""
        return {
            **asdict(self.position),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "num_problems": len(self.problems),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved position; the seed, shuffling, batch size and data must be unchanged."""
        mine = self.state_dict()
        changed = [k for k in ("seed", "shuffle", "batch_size", "num_problems") if state.get(k) != mine[k]]
        if changed:
            details = ", ".join(f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in changed)
            raise ValueError(f"cannot resume the problem stream, its order would differ ({details})")
        self.position = DataPosition(int(state["epoch"]), int(state["index"]))
        self._order = epoch_order(len(self.problems), self.seed, self.position.epoch, self.shuffle)
