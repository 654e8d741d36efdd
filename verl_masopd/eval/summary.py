"""The summary table of an evaluation: accuracy, agreement rate per turn, average turns.

accuracy = mean over all episodes of 1[correct]; agreement@t = (episodes that agreed at turn t)
/ (episodes that played turn t); avg_turns = mean number of turns played.
"""

from __future__ import annotations

import csv
from pathlib import Path


def summarize(records: list[dict], horizon: int) -> dict:
    episodes = [e for r in records for e in r["episodes"]]
    if not episodes:
        raise ValueError("no episodes to summarise")
    row = {
        "problems": len(records),
        "episodes": len(episodes),
        "accuracy": sum(e["correct"] for e in episodes) / len(episodes),
        "avg_turns": sum(e["num_turns"] for e in episodes) / len(episodes),
        "failed_generations": sum(e["failed_generations"] for e in episodes),
    }
    for t in range(horizon):
        played = [e for e in episodes if e["num_turns"] > t]
        agreed = sum(e["turns"][t]["agreed"] for e in played)
        row[f"agreement@{t}"] = agreed / len(played) if played else float("nan")
    return row


def write_summary(row: dict, out_dir: Path) -> None:
    """summary.csv (one row) and summary.md (the same as a markdown table)."""
    with open(out_dir / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    cells = [_format(v) for v in row.values()]
    lines = ["| " + " | ".join(row) + " |", "|" + "---|" * len(row), "| " + " | ".join(cells) + " |"]
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")


def _format(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
