"""Per-role metrics of an evaluation (docs/method.md, "Data and evaluation"), from the episode records.

format_violations/<role> = (responses of role r with a parse error) / (responses of role r);
role_advantage/<role> = mean over the responses of role r that the teacher scored of their
per-response mean role advantage Δ̄ = (1/|y|) Σ_k Δ_k (recorded by `--teacher`, see
`eval/role_advantage.py`). An agent's role is read from the episode record's seats ("agents").
"""

from __future__ import annotations

from collections import defaultdict


def role_metrics(episodes: list[dict]) -> dict[str, float]:
    responses: dict[str, int] = defaultdict(int)
    violations: dict[str, int] = defaultdict(int)
    advantages: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        role_of = {name: seat["role"] for name, seat in episode["agents"].items()}
        for turn in episode["turns"]:
            for agent in turn.get("outputs", {}):
                responses[role_of[agent]] += 1
                violations[role_of[agent]] += agent in turn.get("parse_errors", {})
            for agent, delta in (turn.get("role_advantage") or {}).items():
                if delta is not None:
                    advantages[role_of[agent]].append(delta)
    row = {f"format_violations/{role}": violations[role] / n for role, n in sorted(responses.items())}
    row.update({f"role_advantage/{role}": sum(d) / len(d) for role, d in sorted(advantages.items())})
    return row
