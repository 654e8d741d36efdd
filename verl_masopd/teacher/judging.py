"""The teacher prompted as a judge (the Prompted Critic comparator of the search system): a 0–1
score of each judged reply, read off the teacher's log-probs of the two verdicts.

For a sample whose reply the workflow puts to a judge (`Workflow.critique`: chat messages ending
in a question answered by one of `Workflow.judge_verdicts`, approval first), with x the judge
context (those messages chat-encoded) and ℓ_v = Σ_i log π_T(v_i | x, v_<i) the teacher's log-prob
of verdict v's tokens:

    s = π_T(yes | x) / (π_T(yes | x) + π_T(no | x)) = σ(ℓ_yes − ℓ_no)

the teacher's probability of approval, renormalised over the two verdicts. It is read, not
sampled: the same reply always gets the same score, and a teacher that would answer something
else entirely still gives a score (no parse failure). Both verdicts are scored in one call of
the teacher scorer (teacher/scoring.py), so a prefix-sharing scorer computes x once.

Truncation (`teacher.max_context_length` = L for context + verdict): a context longer than
L − max |v| loses the middle of its tokens (the instruction and the end of the reply with its
report stay), counted in `JudgeStats.truncations`.

Output: `Sample.judge` = s for every judged sample that is not a failed turn; the step's
`JudgeStats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from verl_masopd.rollout.records import FAILED, EpisodeResult
from verl_masopd.teacher.scoring import ScoreRequest, TeacherScorer
from verl_masopd.tokens.chat import encode_messages, encode_text
from verl_masopd.workflows.base import Workflow


def approval(yes_log_prob: float, no_log_prob: float) -> float:
    """s = σ(ℓ_yes − ℓ_no), computed without overflow."""
    d = yes_log_prob - no_log_prob
    if d >= 0:
        return 1.0 / (1.0 + math.exp(-d))
    e = math.exp(d)
    return e / (1.0 + e)


def middle_cut(ids: list[int], budget: int) -> tuple[list[int], int]:
    """`ids` cut to `budget` tokens by dropping the middle (the first ⌊budget/2⌋ and the last
    ⌈budget/2⌉ stay); and how many were dropped."""
    if len(ids) <= budget:
        return ids, 0
    head = budget // 2
    return ids[:head] + ids[len(ids) - (budget - head) :], len(ids) - budget


@dataclass
class JudgeStats:
    """Per step: the replies `judged`, their scores per role, the contexts truncated and the
    tokens the judge read (context + verdict, both verdicts)."""

    judged: int = 0
    scores: dict[str, list[float]] = field(default_factory=dict)
    truncations: int = 0
    judge_tokens: int = 0

    def merge(self, other: JudgeStats) -> JudgeStats:
        """The stats of two batches judged apart, as one batch's."""
        scores = {
            role: self.scores.get(role, []) + other.scores.get(role, []) for role in (*self.scores, *other.scores)
        }
        return JudgeStats(
            self.judged + other.judged,
            scores,
            self.truncations + other.truncations,
            self.judge_tokens + other.judge_tokens,
        )

    def metrics(self) -> dict[str, float]:
        out = {
            "judge/judged": float(self.judged),
            "judge/truncations": float(self.truncations),
            "judge/tokens": float(self.judge_tokens),
        }
        for role, scores in sorted(self.scores.items()):
            out[f"judge/{role}/score"] = sum(scores) / len(scores)
        return out


class JudgeScoring:
    """Scores the judged samples of the step's records with one teacher scorer (module docstring).

    `roles`: the roles whose rows an estimator trains on the judge's score; each must be one of
    the workflow's `judged_roles`."""

    def __init__(self, workflow: Workflow, tokenizer, scorer: TeacherScorer, max_length: int, roles: Sequence[str]):
        unjudged = sorted(set(roles) - set(workflow.judged_roles))
        if unjudged:
            raise ValueError(f"the workflow puts no reply of role {unjudged[0]!r} to a judge")
        self.workflow = workflow
        self.scorer = scorer
        self.roles = set(roles)
        self.verdicts = [encode_text(tokenizer, v) for v in workflow.judge_verdicts]
        if not all(self.verdicts) or self.verdicts[0] == self.verdicts[1]:
            raise ValueError(f"the judge's verdicts {workflow.judge_verdicts} need distinct, non-empty tokenizations")
        self.budget = max_length - max(len(v) for v in self.verdicts)
        if self.budget < 2:
            raise ValueError(f"teacher.max_context_length={max_length} leaves no room for the judge's context")
        self.tokenizer = tokenizer

    async def score(self, results: Sequence[EpisodeResult]) -> JudgeStats:
        """Writes `Sample.judge` into every judged sample of `results`; returns the stats."""
        stats = JudgeStats()
        judged, requests = [], []
        for result in results:
            for sample in result.samples:
                if sample.role not in self.roles or sample.finish_reason == FAILED:
                    continue
                messages = self.workflow.critique(result.episode, result.episode.agent(sample.agent), sample.turn)
                if messages is None:
                    continue
                context, cut = middle_cut(encode_messages(self.tokenizer, messages), self.budget)
                stats.truncations += cut > 0
                judged.append(sample)
                requests += [ScoreRequest(context, verdict) for verdict in self.verdicts]
        scores = await self.scorer.score(requests) if requests else []
        stats.judge_tokens = sum(len(r.context_ids) + len(r.response_ids) for r in requests)
        for i, sample in enumerate(judged):
            yes, no = (sum(scores[2 * i + j]) for j in range(2))
            sample.judge = approval(yes, no)
            stats.scores.setdefault(sample.role, []).append(sample.judge)
        stats.judged = len(judged)
        return stats
