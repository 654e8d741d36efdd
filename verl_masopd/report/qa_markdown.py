"""The QA tables (`qa_tables.py`) as Markdown: rates in %, counts as counts (a macro average of
counts with one decimal), tokens per episode as whole numbers, differences in percentage points
as "Δ [low, high]".

Each heading is the table's title with its unit; a missing cell reads "—"; the best value of a
marked column is bold.
"""

from __future__ import annotations

from verl_masopd.report.qa_bootstrap import Interval
from verl_masopd.report.qa_tables import COUNT, DIFFERENCE, RATE, TOKENS, QaTable

MISSING = "—"
UNITS = {RATE: "%", COUNT: "count", TOKENS: "mean", DIFFERENCE: "percentage points"}


def format_value(value: float | Interval | None, kind: str) -> str:
    """One cell's text; `kind` one of RATE, COUNT, TOKENS, DIFFERENCE."""
    if value is None:
        return MISSING
    if kind == DIFFERENCE:
        return f"{100 * value.difference:+.1f} [{100 * value.low:+.1f}, {100 * value.high:+.1f}]"
    if kind == RATE:
        return f"{100 * value:.1f}"
    if kind == COUNT:
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.0f}"


def qa_table_markdown(table: QaTable) -> str:
    corner = "metric" if table.kind == DIFFERENCE else "system"
    lines = [f"### {table.title} ({UNITS[table.kind]})", "", f"| {corner} | " + " | ".join(table.columns) + " |"]
    lines.append("|---|" + "---|" * len(table.columns))
    for label, row in table.rows.items():
        cells = []
        for column in table.columns:
            text = format_value(row[column], table.kind)
            cells.append(f"**{text}**" if label in table.best.get(column, []) else text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def qa_markdown(tables: list[QaTable]) -> str:
    """Every table, in order, one blank line apart."""
    return "\n".join(qa_table_markdown(table) for table in tables)
