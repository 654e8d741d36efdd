"""What a rollout records: one `Sample` per agent per turn, one `EpisodeResult` per episode, and
one `RolloutGroup` per problem (its G episodes, the group that group baselines are taken over).

These records are the one structure from rollout to loss (docs/design.md, "The record"): the
teacher reads its contexts from them and writes its scores into them (`Sample.teacher`), and
`rollout.batch.to_dataproto` flattens them into verl's DataProto once, at the engine boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from verl_masopd.tokens.context import NO_CUT, Cut
from verl_masopd.workflows.base import Episode, Judgement
from verl_masopd.workflows.problem import Problem

STOP, LENGTH, FAILED = "stop", "length", "failed"


@dataclass(frozen=True)
class ToolUse:
    """One tool call inside a response: the tool, the call's outcome (workflows/tools.py), the
    seconds it ran and the observation tokens appended."""

    tool: str
    outcome: str
    seconds: float
    observation_tokens: int


@dataclass
class TeacherScores:
    """The teacher's scores of a sample's kept response tokens (0 on observation tokens):
    `log_probs[i]` = log π_T(y_i | x_r, y_<i); `contrast[j][i]` the same under the j-th contrasting
    role; `privileged`: x_r held the PAC block. With a top-k distillation mode, `topk_ids[i]` and
    `topk_log_probs[i]`: the teacher's k most likely tokens after x_r, y_<i and their log-probs
    (0 on observation tokens); else None."""

    log_probs: list[float]
    contrast: list[list[float]]
    privileged: bool
    topk_ids: list[list[int]] | None = None
    topk_log_probs: list[list[float]] | None = None


@dataclass
class Sample:
    """One agent's response at one turn of one episode, with the exact context it was sampled from.

    The agent is `agent` (its seat name), `role` and `agent_index` (its index within the role).
    `prompt_ids`: the context u (chat-encoded messages); `response_ids`: the response's tokens (eos
    included when generated), tool observations included; `generated[i]` is 1 where the policy
    sampled response_ids[i] and 0 on observation tokens; `rollout_log_probs[i]`:
    log π_sample(response_ids[i] | u, ...) on generated tokens, 0 on observation tokens.
    `finish_reason`: "stop" (eos), "length" (max new tokens) or "failed" (empty response after
    the bounded retries). `context_cut`: the truncation rule's cut of u (verl_masopd.tokens.context);
    `tool_calls`: the calls inside the response; `teacher`: the teacher's scores, once scored;
    `judge`: the judge's 0–1 score of the reply, once judged (teacher/judging.py); `version`: the
    weight version of its policy that sampled it (the oldest, when an update landed mid-response).
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
    generated: list[int] = field(default_factory=list)
    context_cut: Cut = NO_CUT
    tool_calls: list[ToolUse] = field(default_factory=list)
    teacher: TeacherScores | None = None
    judge: float | None = None
    version: int = 0

    def __post_init__(self):
        if not self.generated:
            self.generated = [1] * len(self.response_ids)
        if len(self.generated) != len(self.response_ids):
            raise ValueError(f"{len(self.generated)} generated flags for {len(self.response_ids)} response tokens")


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
