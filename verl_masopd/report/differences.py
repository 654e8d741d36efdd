"""Each method against a reference method (e.g. OPD): the difference paired by seed, its standard
error and its 95 % t-interval, per column of a table.

For a column, seed s of the method and seed s of the reference share their data order, so the
difference is taken per seed and then averaged (paired.py):

    d_s = x_s − y_s,   d̄ = mean_s d_s,   se = sd(d) / √n,   d̄ ± t_{0.975, n−1} · se

over the n seeds both have. A difference needs two common seeds; otherwise its cell is missing.
Rates and accuracies are differences in points (kind POINTS), Δ in nats (DELTA).
"""

from __future__ import annotations

from verl_masopd.report.paired import paired_difference
from verl_masopd.report.stats import Cell
from verl_masopd.report.tables import DELTA, POINTS, RATE, TURNS, Table

DIFFERENCE_KIND = {RATE: POINTS, POINTS: POINTS, DELTA: DELTA, TURNS: TURNS}


def difference(x: Cell | None, y: Cell | None) -> Cell | None:
    """d̄ ± se [low, high] as a Cell (mean d̄, std se, the per-seed differences and their seeds,
    the interval); None without two common seeds."""
    if x is None or y is None:
        return None
    mine, theirs = dict(zip(x.seeds, x.values)), dict(zip(y.seeds, y.values))
    d = paired_difference(mine, theirs)
    if d is None:
        return None
    per_seed = tuple(mine[s] - theirs[s] for s in d.seeds)
    return Cell(d.mean, d.se, d.n, per_seed, d.seeds, (d.low, d.high))


def difference_table(table: Table, reference: str) -> Table | None:
    """`table`'s methods other than `reference` against it (None when `reference` has no row)."""
    if reference not in table.rows:
        return None
    base = table.rows[reference]
    rows = {
        method: {c: difference(row[c], base[c]) for c in table.columns}
        for method, row in table.rows.items()
        if method != reference
    }
    kinds = {c: DIFFERENCE_KIND[table.kinds[c]] for c in table.columns}
    title = f"{table.title}: difference against {reference}, paired by seed (± standard error [95% t-interval])"
    seeds = {m: min(table.seeds[m], table.seeds[reference]) for m in rows}
    return Table(title, table.columns, kinds, rows, seeds)
