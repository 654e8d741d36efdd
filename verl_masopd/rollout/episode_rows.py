"""The rollout records' structure over the rows of a batch: which rows are one episode, and which
episodes are one problem's group, as `rollout.batch.to_dataproto` lays them out.

`groups[g][e]` holds the rows of the e-th episode (`RolloutGroup.episodes`) of the g-th rollout
group, in the order of its samples (`EpisodeResult.samples`); an episode none of whose samples
has a row (failed, or another policy's) holds none, so positions stay those of the records. The
batch carries it as meta_info["episode_rows"]; estimators that need whole episodes (MARFT's
chains, MAGRPO's alive episodes, CURE's matrix rows) read it instead of regrouping rows by id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from verl import DataProto

EPISODE_ROWS = "episode_rows"


@dataclass(frozen=True)
class EpisodeRows:
    """The rows of each episode of each rollout group (module doc)."""

    groups: tuple[tuple[tuple[int, ...], ...], ...]

    def episodes(self) -> Iterator[tuple[int, ...]]:
        """Every episode's rows, group by group."""
        for group in self.groups:
            yield from group

    def select(self, rows: Sequence[int]) -> EpisodeRows:
        """The structure over `data.select_idxs(rows)`: a kept row renumbered to its position in
        `rows`, the others left out; group and episode positions stay."""
        position = {int(row): i for i, row in enumerate(rows)}
        return EpisodeRows(
            tuple(
                tuple(tuple(position[row] for row in episode if row in position) for episode in group)
                for group in self.groups
            )
        )


def episode_rows(data: DataProto, estimator: str) -> EpisodeRows:
    """`data`'s meta_info["episode_rows"]; missing, a ValueError naming the estimator that needs it."""
    if EPISODE_ROWS not in data.meta_info:
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the batch's episodes (meta_info['{EPISODE_ROWS}'], "
            "set by rollout.batch.to_dataproto), which are missing"
        )
    return data.meta_info[EPISODE_ROWS]
