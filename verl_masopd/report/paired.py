"""The difference between two methods paired by seed, with its t-interval.

Seed s of two methods shares its data order (and initialisation), so the seeds are paired: with
x_s and y_s the two methods' values at the seeds S that both have (n = |S|),

    d_s = x_s − y_s,   d̄ = (1/n) Σ_s d_s,   sd = sqrt(Σ_s (d_s − d̄)² / (n − 1)),   se = sd / √n

and the two-sided `level` interval (95 % by default) is d̄ ± t_{(1+level)/2, n−1} · se, with t the
Student t quantile (scipy.stats.t). It needs n ≥ 2; seeds that only one method has are left out.
Welch's unpaired se(d) = sqrt(s_x²/n + s_y²/m) ignores the pairing: the seeds' shared part of the
variation stays in it, so it is wider than the paired one whenever the seeds' values correlate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from scipy.stats import t as student_t

LEVEL = 0.95


@dataclass(frozen=True)
class PairedDifference:
    """d̄, se, the interval [low, high] at `level`, and the seeds paired."""

    mean: float
    se: float
    low: float
    high: float
    n: int
    level: float
    seeds: tuple

    def as_dict(self) -> dict:
        return {**asdict(self), "seeds": list(self.seeds)}


def paired_difference(
    x: Mapping[object, float], y: Mapping[object, float], level: float = LEVEL
) -> PairedDifference | None:
    """x minus y paired by seed (module doc); `x` and `y` map a seed to its value. None with fewer
    than two common seeds."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    seeds = tuple(sorted(set(x) & set(y)))
    if len(seeds) < 2:
        return None
    d = [x[s] - y[s] for s in seeds]
    mean = statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(len(d))
    half = float(student_t.ppf((1 + level) / 2, len(d) - 1)) * se
    return PairedDifference(mean, se, mean - half, mean + half, len(d), level, seeds)
