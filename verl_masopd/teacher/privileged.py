"""PAC templates: the privileged block p_t that turns an attribution a^{t−1} into teacher-only text.

One template serves one agent per role (a pair of outputs, phrased as a pair) and several agents
per role (every agent's verdict listed, grouped by role), so that two agents of one role that
disagree with each other are reported as they are. The block states verdicts and the implied
decisions (hold / revise); the reference answer or solution is added only with
`pac.reveal_reference=true`.

Only complete attributions (every verdict known) become a block: a check that could not run
gives no privileged block (docs/method.md, "PAC"), which the caller counts.
"""

from __future__ import annotations

from verl_masopd.workflows.base import HOLD, REVISE, Attribution, Episode
from verl_masopd.workflows.problem import MATH, Problem

HEADER = "[Privileged feedback on the previous turn, verified against the reference solution]"
_VERDICT = {True: "correct", False: "wrong"}
_DECISION = {HOLD: "hold its output", REVISE: "revise its output"}


def privileged_block(attribution: Attribution, episode: Episode, agent: str, reveal_reference: bool = False) -> str:
    """The text p_t for the teacher context of `agent`, from the attribution of the previous turn.

    Raises ValueError for an incomplete attribution (the caller gives no block in that case) or
    one that names an agent the episode does not have.
    """
    if not attribution.complete:
        raise ValueError(f"attribution of turn {attribution.turn} is incomplete: {attribution.verdicts}")
    unknown = set(attribution.verdicts) - {a.name for a in episode.agents}
    if unknown:
        raise ValueError(f"attribution of turn {attribution.turn} names unknown agents {sorted(unknown)}")
    by_role: dict[str, list[str]] = {}
    for a in episode.agents:
        if a.name in attribution.verdicts:
            by_role.setdefault(a.role, []).append(a.name)
    if all(len(names) == 1 for names in by_role.values()):
        body = _pair_lines(attribution, by_role, agent)
    else:
        body = _listing_lines(attribution, by_role, agent)
    lines = [HEADER, "The previous turn ended in a conflict.", *body]
    reference = reference_text(episode.problem) if reveal_reference else None
    if reference is not None:
        lines.append(reference)
    return "\n".join(lines)


def _pair_lines(attribution: Attribution, by_role: dict[str, list[str]], agent: str) -> list[str]:
    lines = []
    for role, (name,) in by_role.items():
        you = " (you)" if name == agent else ""
        verdict = _VERDICT[attribution.verdicts[name]]
        decision = _DECISION[attribution.decisions[name]]
        lines.append(f"The {role}'s output{you} was {verdict}: the {role} should {decision}.")
    return lines


def _listing_lines(attribution: Attribution, by_role: dict[str, list[str]], agent: str) -> list[str]:
    lines = []
    for role, names in by_role.items():
        lines.append(f"{role} agents:")
        for name in names:
            you = " (you)" if name == agent else ""
            verdict = _VERDICT[attribution.verdicts[name]]
            decision = _DECISION[attribution.decisions[name]]
            lines.append(f"- {name}{you}: {verdict}; should {decision}.")
    return lines


def reference_text(problem: Problem) -> str | None:
    """The reference as the teacher or the attribution model reads it; None when the problem has none."""
    if problem.domain == MATH and problem.answer is not None:
        return f"Reference answer: {problem.answer}"
    if problem.reference_solution:
        return f"Reference solution:\n```python\n{problem.reference_solution}\n```"
    return None
