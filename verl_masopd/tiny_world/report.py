"""The before/after table of the quickstart, from two evaluations' output folders.

    python -m verl_masopd.tiny_world.report BEFORE_DIR AFTER_DIR [--timings JSON]

Per evaluation (records.jsonl, summary.csv of `python -m verl_masopd.eval`): held-out team
accuracy p ± its standard error sqrt(p (1 − p) / n) over the n episodes, the share of episodes
that ended in agreement, the mean turns to agreement, each role's share of replies that broke its
role's format (a Reasoner writing a program, a Coder writing a test: the student's role
confusion), and the accuracy per ladder level; then
the rise p_after − p_before with the standard error of the difference of two independent
means, sqrt(se_before² + se_after²).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from verl_masopd.tiny_world.world import accuracy_by_source

VIOLATIONS = "format_violations/"


def evaluation(folder: Path) -> dict:
    with open(folder / "summary.csv") as f:
        summary = next(csv.DictReader(f))
    return {
        "by_source": accuracy_by_source(folder / "records.jsonl"),
        "agreed_share": float(summary["agreed_share"]),
        "turns_to_agreement": float(summary["turns_to_agreement"]),
        "format_violations": {
            key.split("/", 1)[1]: float(value) for key, value in summary.items() if key.startswith(VIOLATIONS)
        },
    }


def table(before: dict, after: dict) -> str:
    levels = [s for s in before["by_source"] if s != "all"]
    roles = list(before["format_violations"])
    header = [
        "",
        "accuracy ± se",
        "agreement",
        "turns to agreement",
        *(f"{r} format violations" for r in roles),
        *levels,
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, e in (("before", before), ("after", after)):
        overall = e["by_source"]["all"]
        cells = [
            name,
            f"{overall['accuracy']:.3f} ± {overall['se']:.3f}",
            f"{e['agreed_share']:.3f}",
            f"{e['turns_to_agreement']:.2f}",
            *(f"{e['format_violations'].get(role, float('nan')):.3f}" for role in roles),
            *(f"{e['by_source'][level]['accuracy']:.3f}" for level in levels),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rise(before: dict, after: dict) -> tuple[float, float]:
    """(p_after − p_before, its standard error)."""
    b, a = before["by_source"]["all"], after["by_source"]["all"]
    return a["accuracy"] - b["accuracy"], math.sqrt(a["se"] ** 2 + b["se"] ** 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl_masopd.tiny_world.report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table and the numbers here (report.md, report.json)")
    args = parser.parse_args(argv)
    before, after = evaluation(args.before), evaluation(args.after)
    emit(table(before, after), "held-out team accuracy", before, after, rise(before, after), args.out)
    return 0


def emit(table_text: str, measure: str, before: dict, after: dict, rise: tuple[float, float], out: Path | None) -> None:
    """Print the table and the rise of `measure`; with `out`, also write report.md and report.json."""
    delta, se = rise
    ratio = f" ({delta / se:.1f} se)" if se > 0 else ""
    text = f"{table_text}\n\nrise of {measure}: {delta:+.3f} ± {se:.3f}{ratio}"
    print(text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(text + "\n")
        numbers = {"before": before, "after": after, "rise": delta, "rise_se": se}
        (out / "report.json").write_text(json.dumps(numbers, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
