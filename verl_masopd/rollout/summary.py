"""The summary table of an evaluation: accuracy, agreement and collaboration behaviour.

accuracy = mean over all episodes of 1[correct]; agreement@t = (episodes that agreed at turn t)
/ (episodes that played turn t); avg_turns = mean number of turns played. The collaboration
metrics of docs/method.md, "Data and evaluation" that need no teacher (agreed_share, turns_to_agreement,
revise_rate_at_fault, hold_rate_correct) are defined on their functions below; each is NaN
when it has no case to average over. A system of one agent (SA+ST, SA+MT) has no agreement, nor
has a workflow whose `agrees` is False (the search team): their agreement@t, agreed_share and
turns_to_agreement are NaN, not 0. The per-role metrics (format violations, role advantage Δ)
are defined in role_metrics.py.
"""

from __future__ import annotations

import csv
from pathlib import Path

from verl_masopd.rollout.role_metrics import role_metrics


def summarize(records: list[dict], horizon: int, agreement: bool = True) -> dict:
    """The summary row of `records`; `agreement`: the workflow's `agrees`."""
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
    row.update(agreement_metrics(episodes, horizon, agreement))
    row["revise_rate_at_fault"] = revise_rate_at_fault(episodes)
    row["hold_rate_correct"] = hold_rate_correct(episodes)
    row.update(role_metrics(episodes))
    return row


def agreement_metrics(episodes: list[dict], horizon: int, agreement: bool = True) -> dict:
    """agreement@t for t < horizon, agreed_share and turns_to_agreement; all NaN for a system of
    one agent or without `agreement`."""
    if not agreement or max(len(e["agents"]) for e in episodes) < 2:
        names = [f"agreement@{t}" for t in range(horizon)] + ["agreed_share", "turns_to_agreement"]
        return dict.fromkeys(names, float("nan"))
    row = {}
    for t in range(horizon):
        played = [e for e in episodes if e["num_turns"] > t]
        agreed = sum(e["turns"][t]["agreed"] for e in played)
        row[f"agreement@{t}"] = agreed / len(played) if played else float("nan")
    return {**row, "agreed_share": agreed_share(episodes), "turns_to_agreement": turns_to_agreement(episodes)}


def agreed_share(episodes: list[dict]) -> float:
    """(episodes whose last turn T-1 agreed) / (episodes)."""
    return _mean([_ended_in_agreement(e) for e in episodes])


def turns_to_agreement(episodes: list[dict]) -> float:
    """Mean of T (turns played) over the episodes whose last turn agreed."""
    return _mean([e["num_turns"] for e in episodes if _ended_in_agreement(e)])


def revise_rate_at_fault(episodes: list[dict]) -> float:
    """Mean of 1[o_i^{t+1} ≠ o_i^t] over the responses (t, i) with verdict v_i^t = False."""
    return _mean([changed for verdict, changed in conflict_responses(episodes) if verdict is False])


def hold_rate_correct(episodes: list[dict]) -> float:
    """Mean of 1[o_i^{t+1} = o_i^t] over the responses (t, i) with verdict v_i^t = True."""
    return _mean([not changed for verdict, changed in conflict_responses(episodes) if verdict is True])


def conflict_responses(episodes: list[dict]) -> list[tuple[bool, bool]]:
    """(v_i^t, 1[o_i^{t+1} ≠ o_i^t]) for every conflict turn t < T-1 with verdicts and every agent i
    whose verdict v_i^t is not None; o_i^t are agent i's parsed fields at turn t."""
    responses = []
    for e in episodes:
        for now, after in zip(e["turns"], e["turns"][1:]):
            if now["agreed"] or not now["verdicts"]:
                continue
            for agent, verdict in now["verdicts"].items():
                if verdict is not None:
                    responses.append((verdict, after["parsed"][agent] != now["parsed"][agent]))
    return responses


def _ended_in_agreement(episode: dict) -> bool:
    return episode["turns"][-1]["agreed"]


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else float("nan")


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
