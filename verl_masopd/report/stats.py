"""A table cell: mean ± sample standard deviation over seeds.

mean = (1/n) Σ_s x_s; std = sqrt(Σ_s (x_s − mean)² / (n − 1)), undefined (None) for n = 1.
A cell with no value is missing (None), never zero. `seeds` names the seed of each value (so that
two methods' cells pair by seed); a difference's cell also carries its interval (paired.py).
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
    seeds: tuple = ()
    interval: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        out = {**asdict(self), "values": list(self.values), "seeds": list(self.seeds)}
        if self.interval is None:
            del out["interval"]
        else:
            out["interval"] = list(self.interval)
        return out


def cell(values: list[float], seeds: list | None = None) -> Cell | None:
    """mean ± std of `values`; `seeds[i]` is the seed of `values[i]` when given."""
    if not values:
        return None
    if seeds is not None and len(seeds) != len(values):
        raise ValueError(f"{len(seeds)} seeds for {len(values)} values")
    std = statistics.stdev(values) if len(values) > 1 else None
    return Cell(statistics.fmean(values), std, len(values), tuple(values), tuple(seeds or ()))


def mean_of_present(values: list[float | None]) -> float | None:
    """The mean of the values that are not None (None when there is none)."""
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
