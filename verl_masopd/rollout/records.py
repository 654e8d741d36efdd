"""What a rollout records: one `Sample` per agent per turn, one `EpisodeResult` per episode."""

from __future__ import annotations

from dataclasses import dataclass

from verl_masopd.workflows.base import Episode, Judgement

STOP, LENGTH, FAILED = "stop", "length", "failed"


@dataclass
class Sample:
    """One agent's response at one turn of one episode, with the exact context it was sampled from.

    `prompt_ids`: the context u (chat-encoded messages); `response_ids`: the sampled tokens (eos
    included when generated); `rollout_log_probs[i]`: log π_sample(response_ids[i] | u, ...).
    `finish_reason`: "stop" (eos), "length" (max new tokens) or "failed" (empty response after
    the bounded retries).
    """

    episode_id: str
    group_id: str
    branch: int
    turn: int
    agent: str
    role: str
    policy: str
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    finish_reason: str


@dataclass
class EpisodeResult:
    """A finished episode: the workflow's `Episode`, every turn's `Sample`s and the `Judgement`."""

    episode_id: str
    group_id: str
    episode: Episode
    samples: list[Sample]
    judgement: Judgement
    failed_generations: int
