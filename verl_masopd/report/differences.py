"""Each method against a reference method (e.g. OPD): the difference of the seed means and its
standard error, per column of a table.

For a column with the method's seed values x (n of them) and the reference's y (m of them):

    d = mean(x) − mean(y),   se(d) = sqrt(s_x² / n + s_y² / m)

with s the sample standard deviations (the seeds of two methods are independent runs: Welch's
unpaired standard error). A difference needs two seeds on each side; otherwise its cell is
missing. Rates and accuracies are differences in points (kind POINTS), Δ in nats (DELTA).
"""

from __future__ import annotations

import math

from verl_masopd.report.stats import Cell
from verl_masopd.report.tables import DELTA, POINTS, RATE, TURNS, Table

DIFFERENCE_KIND = {RATE: POINTS, POINTS: POINTS, DELTA: DELTA, TURNS: TURNS}


def difference(x: Cell | None, y: Cell | None) -> Cell | None:
    """d ± se(d) as a Cell (mean d, std se, n the smaller seed count); None without two seeds each."""
    if x is None or y is None or x.n < 2 or y.n < 2:
        return None
    se = math.sqrt(x.std**2 / x.n + y.std**2 / y.n)
    return Cell(x.mean - y.mean, se, min(x.n, y.n), ())


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
    title = f"{table.title}: difference against {reference} (± standard error over seeds)"
    seeds = {m: min(table.seeds[m], table.seeds[reference]) for m in rows}
    return Table(title, table.columns, kinds, rows, seeds)
