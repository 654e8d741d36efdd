"""A table cell: mean ± sample standard deviation over seeds.

mean = (1/n) Σ_s x_s; std = sqrt(Σ_s (x_s − mean)² / (n − 1)), undefined (None) for n = 1.
A cell with no value is missing (None), never zero.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float | None
    n: int
    values: tuple[float, ...]

    def as_dict(self) -> dict:
        return {**asdict(self), "values": list(self.values)}


def cell(values: list[float]) -> Cell | None:
    if not values:
        return None
    std = statistics.stdev(values) if len(values) > 1 else None
    return Cell(statistics.fmean(values), std, len(values), tuple(values))


def mean_of_present(values: list[float | None]) -> float | None:
    """The mean of the values that are not None (None when there is none)."""
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
