"""Evaluation of frozen policies: k episodes per problem, one JSON-ready record per problem."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup
from verl_masopd.workflows.base import Workflow
from verl_masopd.workflows.problem import Problem

# the role advantage Δ̄ per (episode_id, turn, agent) of finished groups (eval/role_advantage.py's
# `RoleAdvantageScorer`)
ScoreRoleAdvantages = Callable[[Sequence[RolloutGroup]], Awaitable[dict[tuple[str, int, str], float]]]


async def evaluate(
    manager: RolloutManager,
    problems: Sequence[Problem],
    k: int,
    batch_size: int,
    on_episode_done: Callable[[EpisodeResult], None] | None = None,
    role_advantage: ScoreRoleAdvantages | None = None,
    on_group_done: Callable[[RolloutGroup], None] | None = None,
) -> list[dict]:
    """Records of `problems` in order, played `batch_size` problems at a time, k episodes each;
    with `role_advantage`, every turn also records the teacher's Δ̄ per agent. `on_group_done`
    receives each problem's played group, in the problems' order."""
    records = []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        groups = await manager.run(chunk, group_size=k, on_episode_done=on_episode_done)
        advantages = await role_advantage(groups) if role_advantage is not None else None
        for group in groups:
            records.append(problem_record(manager.workflow, group))
            if advantages is not None:
                annotate(records[-1], advantages)
            if on_group_done is not None:
                on_group_done(group)
    return records


def problem_record(workflow: Workflow, group: RolloutGroup) -> dict:
    """uid, per-episode outputs / verdicts / turns / correctness, and the problem's accuracy."""
    problem = group.problem
    episodes = [episode_record(workflow, r) for r in group.episodes]
    return {
        "uid": problem.uid,
        "domain": problem.domain,
        "data_source": problem.data_source,
        "accuracy": sum(e["correct"] for e in episodes) / len(episodes),
        "episodes": episodes,
    }


def episode_record(workflow: Workflow, result: EpisodeResult) -> dict:
    """The seats (name → role and index), the outcome and per-turn outputs (raw text and parsed
    fields), reports, agreement and verdicts."""
    episode, judgement = result.episode, result.judgement
    turns = []
    for turn in episode.turns:
        attribution = None if turn.agreed else workflow.attribute(episode, turn.index)
        turns.append(
            {
                "turn": turn.index,
                "outputs": {name: action.text for name, action in turn.actions.items()},
                "parsed": {name: action.fields for name, action in turn.actions.items()},
                "parse_errors": {name: action.error for name, action in turn.actions.items() if action.error},
                "report": turn.report,
                "agreed": turn.agreed,
                "verdicts": None if attribution is None else attribution.verdicts,
                "verifier": turn.verifier,
            }
        )
    return {
        "episode_id": result.episode_id,
        "agents": {a.name: {"role": a.role, "index": a.index} for a in episode.agents},
        "correct": judgement.correct,
        "team": judgement.team,
        "submission": judgement.submission,
        "num_turns": len(episode.turns),
        "failed_generations": result.failed_generations,
        "turns": turns,
    }


def annotate(record: dict, advantages: dict[tuple[str, int, str], float]) -> None:
    """Writes "role_advantage" into every turn of a problem record (None where nothing was scored)."""
    for episode in record["episodes"]:
        for turn in episode["turns"]:
            key = (episode["episode_id"], turn["turn"])
            turn["role_advantage"] = {agent: advantages.get((*key, agent)) for agent in turn["outputs"]}
