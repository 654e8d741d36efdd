"""What a rollout records: one `Sample` per agent per turn, one `EpisodeResult` per episode, and
one `RolloutGroup` per problem (its G episodes, the group that group baselines are taken over)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from verl_masopd.workflows.base import Episode, Judgement
from verl_masopd.workflows.problem import Problem

STOP, LENGTH, FAILED = "stop", "length", "failed"


@dataclass
class Sample:
    """One agent's response at one turn of one episode, with the exact context it was sampled from.

    The agent is `agent` (its seat name), `role` and `agent_index` (its index within the role).
    `prompt_ids`: the context u (chat-encoded messages); `response_ids`: the sampled tokens (eos
    included when generated); `rollout_log_probs[i]`: log π_sample(response_ids[i] | u, ...).
    `finish_reason`: "stop" (eos), "length" (max new tokens) or "failed" (empty response after
    the bounded retries).
    """

    episode_id: str
    branch: int
    turn: int
    agent: str
    role: str
    agent_index: int
    policy: str
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    finish_reason: str


@dataclass
class EpisodeResult:
    """A finished episode: the workflow's `Episode`, every turn's `Sample`s and the `Judgement`."""

    episode_id: str
    episode: Episode
    samples: list[Sample]
    judgement: Judgement
    failed_generations: int


@dataclass
class RolloutGroup:
    """One problem and the episodes played from it; `uid` (the problem's) keys the group in a batch."""

    problem: Problem
    episodes: list[EpisodeResult]

    @property
    def uid(self) -> str:
        return self.problem.uid


def episodes_of(groups: Iterable[RolloutGroup]) -> list[EpisodeResult]:
    """Every episode of `groups`, group by group."""
    return [result for group in groups for result in group.episodes]
