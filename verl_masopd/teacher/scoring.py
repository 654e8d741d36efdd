"""Teacher scoring for MAS-OPD: ℓT_k(q) = log π_T(y_k | x_q, y_<k) for every student response y,
under its own role r and the κ contrasting roles C_r (docs/method.md, "MAS-OPD").

One batched teacher pass per role condition: pass 0 scores every response under its own role,
pass i (1 ≤ i ≤ κ) under its i-th contrasting role. RAS therefore costs at most one extra pass
per response per contrasting role, whatever the number of agents. A scorer that shares prefixes
(`shares_prefixes`, e.g. the engine scorer on CPU) gets all passes in one call instead, so that
it computes the prefix the role conditions of a response share once; a server scorer gets the
passes in turn, own role first, so that a prefix cache can serve the contrast passes. C_r holds the κ roles that
follow r in the workflow's role order (cyclically); with two role types, the other role.

Alignment: a scorer sees seq = x_q + y, whose length differs from the student's u + y. Row j of
a sequence's log-probs is log p(seq[j+1] | seq[:j+1]), so response token i is row |x_q| − 1 + i.

Several teachers (teacher/teachers.py): each response is scored by the teachers its row routes
to, every pass by each of them, and its `TeacherScores` hold their α-weighted sum.

With `topk` > 0 (a top-k distillation mode) the own-role pass also returns the teacher's top k
at every response position (`TeacherScorer.score_topk`), kept in `TeacherScores.topk_ids` /
`topk_log_probs`; the contrast passes stay sampled-token scores, as RAS reads them.

Input: the step's records (`EpisodeResult`s, rollout/records.py): every sample that is not a
failed turn, of the roles scored (`roles`: those whose estimator reads the teacher; all when
None), in record order, its response cut to the batch's response length. Each sample's
teacher contexts are built from its episode and from the cut its own context u received
(`Sample.context_cut`). Output: `Sample.teacher` (`TeacherScores`: the own-role scores, the κ
contrast passes, whether x_r held a PAC block), 0 on a response's observation tokens (tool
results are context for the teacher, never scored), and the step's `ScoringStats`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from verl_masopd.rollout.records import FAILED, EpisodeResult, Sample, TeacherScores
from verl_masopd.teacher.attribution import Attributions
from verl_masopd.teacher.contexts import TeacherContext, TeacherContextBuilder
from verl_masopd.teacher.teachers import Teacher, Teachers, combine


def kept(sample: Sample, max_response_len: int | None) -> list[int]:
    """The response tokens the batch keeps (its first `max_response_len`)."""
    return sample.response_ids if max_response_len is None else sample.response_ids[:max_response_len]


@dataclass(frozen=True)
class ScoreRequest:
    """One response y to score after the teacher context x_q."""

    context_ids: list[int]
    response_ids: list[int]


@dataclass(frozen=True)
class TopKScores:
    """A response's scores with the teacher's top k at every position i: `log_probs[i]` =
    log π_T(y_i | x_q, y_<i); `ids[i]` the k most likely tokens after x_q, y_<i, most likely
    first, and `top_log_probs[i]` their log-probs."""

    log_probs: list[float]
    ids: list[list[int]]
    top_log_probs: list[list[float]]


class TeacherScorer(Protocol):
    async def score(self, requests: Sequence[ScoreRequest]) -> list[list[float]]:
        """One batched teacher pass: for each request, [log π_T(y_i | x_q, y_<i) for i < |y|].

        A scorer may set `shares_prefixes` (then it gets all passes in one call) and
        `computed_tokens` (the tokens its last call ran through the model)."""

    async def score_topk(self, requests: Sequence[ScoreRequest], k: int) -> list[TopKScores]:
        """`score` with the teacher's top k at every response position (top-k distillation modes)."""


def response_rows(sequence_rows: Sequence, context_len: int, response_len: int) -> list:
    """The rows of a per-sequence log-prob list that belong to the response (rows |x_q| − 1 + i)."""
    if context_len < 1:
        raise ValueError("a teacher context needs at least one token")
    start = context_len - 1
    if len(sequence_rows) < start + response_len:
        raise ValueError(
            f"{len(sequence_rows)} log-prob rows cannot cover a context of {context_len} "
            f"and a response of {response_len} tokens"
        )
    return list(sequence_rows[start : start + response_len])


def contrast_roles(role: str, roles: Sequence[str], kappa: int) -> list[str]:
    """C_r: the κ roles after `role` in `roles`, cyclically."""
    if role not in roles:
        raise ValueError(f"role {role!r} is not one of the workflow's roles {tuple(roles)}")
    if not 0 <= kappa <= len(roles) - 1:
        raise ValueError(
            f"algorithm.masopd.num_contrast_roles={kappa}, but the workflow has {len(roles) - 1} contrasting roles"
        )
    i = roles.index(role)
    return [roles[(i + k) % len(roles)] for k in range(1, kappa + 1)]


@dataclass
class ScoringStats:
    """Per batch: `responses` scored, `passes` (1 + κ), `teacher_tokens` (|x_q| + |y| summed over
    passes and teachers), `shared_prefix_tokens` (leading tokens a contrast context shares with x_r,
    the most a prefix cache could skip), `computed_tokens` (tokens the scorers ran through their
    models, where they report them; else teacher_tokens), `truncations` and `truncated_tokens`
    (truncation rule of contexts.py), with several teachers `weights`, each teacher's α_t per
    response it scored (teacher/teachers.py), and with `teacher.privileged=reference` `references`,
    the responses whose contexts held the problem's reference (None: the setting is off)."""

    responses: int = 0
    passes: int = 0
    teacher_tokens: int = 0
    shared_prefix_tokens: int = 0
    computed_tokens: int = 0
    truncations: int = 0
    truncated_tokens: int = 0
    weights: dict[str, list[float]] = field(default_factory=dict)
    references: int | None = None

    def merge(self, other: ScoringStats) -> ScoringStats:
        """The stats of two batches scored apart, as one batch's: counts add, weights concatenate."""
        counts = ("responses", "teacher_tokens", "shared_prefix_tokens", "computed_tokens", "truncations")
        out = ScoringStats(passes=self.passes or other.passes)
        for name in (*counts, "truncated_tokens"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in (*self.weights, *other.weights):
            out.weights[name] = self.weights.get(name, []) + other.weights.get(name, [])
        if self.references is not None or other.references is not None:
            out.references = (self.references or 0) + (other.references or 0)
        return out


class TeacherScoring:
    """Scores the step's records (see the module docstring); `scorer` is one scorer, or one per
    entry of `teachers` (several teachers, teacher/teachers.py)."""

    def __init__(
        self,
        builder: TeacherContextBuilder,
        scorer: TeacherScorer | Sequence[TeacherScorer],
        num_contrast_roles: int,
        pac_enable: bool = True,
        roles: Sequence[str] | None = None,
        topk: int = 0,
        teachers: Teachers | None = None,
    ):
        contrast_roles(builder.workflow.roles[0], builder.workflow.roles, num_contrast_roles)
        self.scorers = list(scorer) if isinstance(scorer, list | tuple) else [scorer]
        self.teachers = teachers or Teachers(tuple(Teacher(f"teacher{i}", "") for i in range(len(self.scorers))))
        if len(self.teachers.entries) != len(self.scorers):
            raise ValueError(f"{len(self.scorers)} scorers for {len(self.teachers.entries)} teachers")
        self.topk = topk
        self.roles = set(builder.workflow.roles if roles is None else roles)
        self.builder = builder
        self.kappa = num_contrast_roles
        self.pac_enable = pac_enable

    async def score(
        self,
        results: Sequence[EpisodeResult],
        attributions: Attributions | None = None,
        max_response_len: int | None = None,
    ) -> ScoringStats:
        """Writes `Sample.teacher` into every sample of `results` of a scored role that is not failed
        and that a teacher scores; returns the stats.

        `attributions` gives a^{t−1} (None or pac_enable=False: no privileged blocks);
        `max_response_len` is the batch's response length (the responses the loss will see).
        """
        rows: list[Sample] = []
        routes: list[list[int]] = []
        contexts: list[list[TeacherContext]] = [[] for _ in range(1 + self.kappa)]
        roles = self.builder.workflow.roles
        for result in results:
            for sample in result.samples:
                if sample.finish_reason == FAILED or not sample.response_ids or sample.role not in self.roles:
                    continue
                value = self.teachers.routing_value(sample.role, sample.policy, result.episode.problem.data_source)
                scoring = self.teachers.scoring(value)
                if not scoring:
                    continue
                rows.append(sample)
                routes.append(scoring)
                n = len(kept(sample, max_response_len))
                attribution = (
                    attributions.previous(result.episode_id, sample.turn) if self.pac_enable and attributions else None
                )
                for i, condition in enumerate([sample.role, *contrast_roles(sample.role, roles, self.kappa)]):
                    contexts[i].append(
                        self.builder.build(
                            result.episode, sample.agent, sample.turn, condition, attribution, n, sample.context_cut
                        )
                    )

        stats = ScoringStats(responses=len(rows), passes=1 + self.kappa)
        passes = [
            [ScoreRequest(c.ids, kept(sample, max_response_len)) for c, sample in zip(pass_contexts, rows, strict=True)]
            for pass_contexts in contexts
        ]
        scores: list[dict[int, list]] = [{} for _ in rows]  # row → teacher → the passes' scores
        for t, scorer in enumerate(self.scorers):
            mine = [j for j, route in enumerate(routes) if t in route]
            if not mine:
                continue
            teacher_passes = [[requests[j] for j in mine] for requests in passes]
            for j, *row_scores in zip(mine, *await self._score_passes(teacher_passes, stats, scorer), strict=True):
                scores[j][t] = row_scores
        for pass_contexts in contexts:
            stats.truncations += sum(c.cut_tokens > 0 for c in pass_contexts)
            stats.truncated_tokens += sum(c.cut_tokens for c in pass_contexts)
        for target, *others in zip(*contexts, strict=True):
            stats.shared_prefix_tokens += sum(len(os.path.commonprefix([target.ids, c.ids])) for c in others)
        for j, (sample, context) in enumerate(zip(rows, contexts[0], strict=True)):
            sample.teacher = self._combined(sample, scores[j], context.privileged, stats)
        if self.builder.reference:
            stats.references = sum(c.reference for c in contexts[0])
        return stats

    def _combined(
        self, sample: Sample, scores: dict[int, list], privileged: bool, stats: ScoringStats
    ) -> TeacherScores:
        """One response's `TeacherScores` from its teachers' passes: Σ_t α_t ℓT_t (teachers.py),
        0 on observation tokens; the top k of its one teacher with `topk`."""
        mask = sample.generated
        teachers = sorted(scores)
        own = [scores[t][0].log_probs if self.topk else scores[t][0] for t in teachers]
        alphas = self.teachers.weights(teachers, own, mask) if len(teachers) > 1 else [1.0]
        if self.teachers.several:
            for t, alpha in zip(teachers, alphas, strict=True):
                stats.weights.setdefault(self.teachers.entries[t].name, []).append(alpha)
        passes = [combine(alphas, own)] + [
            combine(alphas, [scores[t][1 + i] for t in teachers]) for i in range(self.kappa)
        ]
        own_row, *contrast = [[float(x) * m for x, m in zip(p, mask[: len(p)], strict=True)] for p in passes]
        out = TeacherScores(own_row, contrast, privileged)
        if self.topk:
            top = scores[teachers[0]][0]
            out.topk_ids = _on_generated(top.ids, mask, 0)
            out.topk_log_probs = _on_generated(top.top_log_probs, mask, 0.0)
        return out

    async def _score_passes(self, passes: list[list[ScoreRequest]], stats: ScoringStats, scorer) -> list[list]:
        """Scores of every pass (the own-role pass's as `TopKScores` with `topk`) by one teacher's
        `scorer`; all passes in one call to a prefix-sharing scorer, else pass by pass, own role first.
        Adds the passes' tokens to `stats`."""
        n = len(passes[0])
        if getattr(scorer, "shares_prefixes", False):
            everything = [r for requests in passes for r in requests]
            flat = await (scorer.score_topk(everything, self.topk) if self.topk else scorer.score(everything))
            calls = [flat[i * n : (i + 1) * n] for i in range(len(passes))]
            if self.topk:
                calls[1:] = [[top.log_probs for top in call] for call in calls[1:]]
            computed = [getattr(scorer, "computed_tokens", None)]
        else:
            calls, computed = [], []
            for i, requests in enumerate(passes):
                first_topk = self.topk and i == 0
                calls.append(await (scorer.score_topk(requests, self.topk) if first_topk else scorer.score(requests)))
                computed.append(getattr(scorer, "computed_tokens", None))
        totals = sum(len(r.context_ids) + len(r.response_ids) for requests in passes for r in requests)
        stats.teacher_tokens += totals
        stats.computed_tokens += totals if None in computed else sum(computed)
        return calls


def _on_generated(rows: list[list], mask: Sequence[int], fill) -> list[list]:
    """Top-k rows kept where the policy generated the token, `fill` on observation tokens."""
    return [row if m else [fill] * len(row) for row, m in zip(rows, mask, strict=False)]
