"""Tables as Markdown: rates and accuracies in %, Δ in nats per token, turns as counts.

A cell reads "mean ± std" ("mean" alone from one seed), a difference's cell "d̄ ± se [low, high]"
(differences.py), "(n=k)" when fewer seeds than the method's measured it, "—" when missing; the
best mean of a column is bold.
"""

from __future__ import annotations

from verl_masopd.report.stats import Cell
from verl_masopd.report.tables import DELTA, POINTS, RATE, TURNS, Table

MISSING = "—"
# kind: (mean format, std format, scale)
FORMATS = {
    RATE: ("{:.1f}", "{:.1f}", 100),
    POINTS: ("{:+.1f}", "{:.1f}", 100),
    DELTA: ("{:+.3f}", "{:.3f}", 1),
    TURNS: ("{:.2f}", "{:.2f}", 1),
}


def format_cell(c: Cell | None, kind: str, seeds: int) -> str:
    if c is None:
        return MISSING
    mean_format, std_format, scale = FORMATS[kind]
    text = mean_format.format(scale * c.mean)
    if c.std is not None:
        text += " ± " + std_format.format(scale * c.std)
    if c.interval is not None:
        low, high = (mean_format.format(scale * v) for v in c.interval)
        text += f" [{low}, {high}]"
    if c.n < seeds:
        text += f" (n={c.n})"
    return text


def table_markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", "| method | seeds | " + " | ".join(table.columns) + " |"]
    lines.append("|---|---|" + "---|" * len(table.columns))
    for method, row in table.rows.items():
        cells = []
        for column in table.columns:
            text = format_cell(row[column], table.kinds[column], table.seeds[method])
            cells.append(f"**{text}**" if method in table.best.get(column, []) else text)
        lines.append(f"| {method} | {table.seeds[method]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
