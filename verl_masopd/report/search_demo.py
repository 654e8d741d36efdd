"""The before/after table of the search demo (recipes/search_demo.sh), from two evaluations of the
search workflow (their `qa_attempts.jsonl`, eval/qa_attempts.py).

    python -m verl_masopd.report.search_demo BEFORE_DIR AFTER_DIR [--out DIR]

Per evaluation, over its n attempts: exact match p ± its standard error sqrt(p (1 − p) / n), EM of
the one-hop and of the two-hop questions, relaxed EM, the share of attempts whose team gave no
candidate and whose answer was untagged, and the tokens generated and read per episode; then the
rise p_after − p_before with the standard error of the difference of two independent means,
sqrt(se_before² + se_after²).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from verl_masopd.eval.qa_attempts import QA_ATTEMPTS_FILE, read_attempts
from verl_masopd.tiny_world.report import emit


def share(values: list[bool]) -> dict:
    n = len(values)
    p = sum(values) / n
    return {"n": n, "p": p, "se": math.sqrt(p * (1 - p) / n)}


def evaluation(folder: Path) -> dict:
    attempts = read_attempts(folder / QA_ATTEMPTS_FILE)
    if not attempts:
        raise ValueError(f"{folder / QA_ATTEMPTS_FILE}: no attempts")
    datasets = sorted({a.dataset for a in attempts})
    return {
        "em": share([a.em for a in attempts]),
        "em_by_dataset": {d: share([a.em for a in attempts if a.dataset == d])["p"] for d in datasets},
        "relaxed_em": share([a.relaxed_em for a in attempts])["p"],
        "no_candidate": share([a.failure == "no_candidate" for a in attempts])["p"],
        "untagged": share([a.failure == "untagged" for a in attempts])["p"],
        "tokens_generated": sum(a.tokens_generated for a in attempts) / len(attempts),
        "tokens_read": sum(a.tokens_read for a in attempts) / len(attempts),
    }


def table(before: dict, after: dict) -> str:
    datasets = list(before["em_by_dataset"])
    header = ["", "EM ± se", *(f"EM {d}" for d in datasets), "relaxed EM", "no candidate", "untagged",
              "tokens generated", "tokens read"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, e in (("before", before), ("after", after)):
        cells = [
            name,
            f"{e['em']['p']:.3f} ± {e['em']['se']:.3f}",
            *(f"{e['em_by_dataset'].get(d, float('nan')):.3f}" for d in datasets),
            *(f"{e[m]:.3f}" for m in ("relaxed_em", "no_candidate", "untagged")),
            *(f"{e[m]:.0f}" for m in ("tokens_generated", "tokens_read")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rise(before: dict, after: dict) -> tuple[float, float]:
    """(p_after − p_before, its standard error)."""
    b, a = before["em"], after["em"]
    return a["p"] - b["p"], math.sqrt(a["se"] ** 2 + b["se"] ** 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl_masopd.report.search_demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table and the numbers here (report.md, report.json)")
    args = parser.parse_args(argv)
    try:
        before, after = evaluation(args.before), evaluation(args.after)
    except (OSError, ValueError) as e:
        print(f"search_demo: {e}", file=sys.stderr)
        return 2
    emit(table(before, after), "held-out exact match", before, after, rise(before, after), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
