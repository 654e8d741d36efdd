"""Teacher contexts x_q (docs/method.md, "MAS-OPD"): the observation u of a recorded turn, rendered
under role q's condition, plus the privileged block p_t (PAC) when turn t−1 ended in a conflict,
and with `teacher.privileged=reference` the problem's reference block b (teacher/reference.py).

    x_q = encode(arrange(render(episode, agent, t, role=q), layout, b ⊕ p_t))

b and p_t (joined by a blank line, b first) are appended to the observation message, so they
enter the teacher context only (the students' contexts are `render(episode, agent, t)` as the
rollout encoded them) and every role condition of one response carries the same b and p_t: the
RAS passes differ in the role condition alone. With b in every context, PAC's block leaves the
reference out (`pac.reveal_reference` would repeat it).

The layout (`workflow.context_layout`, see `verl_masopd.tokens.context`) places the role condition before
(role_first) or after (role_last) the observation and p_t; the students' contexts use the same
layout, so x_r without p_t is u.

Truncation (`teacher.max_context_length` = L tokens for context + response): the response y is
never cut. x_q first loses exactly the history tokens the student's u lost (the cut the rollout
recorded with the sample, `Sample.context_cut`), then, if |x_q| + |y| still exceeds L, more from the middle of the
history (the rule of `verl_masopd.tokens.context`). Every truncated context is counted
(`TeacherContext.cut_tokens` > 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_masopd.teacher.privileged import privileged_block
from verl_masopd.teacher.reference import reference_block
from verl_masopd.tokens.context import NO_CUT, ContextEncoder, Cut
from verl_masopd.workflows.base import Attribution, Episode, Workflow


@dataclass(frozen=True)
class TeacherContext:
    """x_q as token ids; `privileged`: p_t is in it; `cut_tokens`: tokens the truncation rule dropped;
    `reference`: b is in it."""

    ids: list[int]
    privileged: bool
    cut_tokens: int
    reference: bool = False


class TeacherContextBuilder:
    """Builds x_q for recorded turns with the students' chat encoding (`verl_masopd.tokens.chat`)."""

    def __init__(
        self,
        workflow: Workflow,
        tokenizer,
        max_length: int,
        reveal_reference: bool = False,
        *,
        layout: str = "role_first",
        reference: bool = False,
    ):
        if max_length < 2:
            raise ValueError(f"teacher.max_context_length must be >= 2, got {max_length}")
        self.workflow = workflow
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.reference = reference
        self.reveal_reference = reveal_reference and not reference
        self.encoder = ContextEncoder(workflow, tokenizer, layout)

    def messages(
        self, episode: Episode, agent: str, turn: int, role: str, attribution: Attribution | None
    ) -> tuple[list[dict], bool]:
        """(chat messages of x_q, whether p_t is in them).

        `attribution` is a^{t−1} (None: turn t−1 ended without a conflict, or PAC is off); an
        incomplete one (a check could not run) gives no block.
        """
        rendered = self.workflow.render(episode, episode.agent(agent), turn, role=role)
        block = self._block(episode, agent, turn, attribution)
        return self.encoder.arrange(rendered, self._privileged(episode, block)), block is not None

    def _privileged(self, episode: Episode, block: str | None) -> str | None:
        """The teacher-only text: b (with `reference`) and p_t, joined by a blank line; None without either."""
        parts = [reference_block(episode.problem) if self.reference else None, block]
        return "\n\n".join(p for p in parts if p is not None) or None

    def _block(self, episode: Episode, agent: str, turn: int, attribution: Attribution | None) -> str | None:
        if attribution is not None and attribution.turn != turn - 1:
            raise ValueError(f"attribution of turn {attribution.turn} given for the context of turn {turn}")
        if attribution is None or not attribution.complete:
            return None
        return privileged_block(attribution, episode, agent, self.reveal_reference)

    def build(
        self,
        episode: Episode,
        agent: str,
        turn: int,
        role: str,
        attribution: Attribution | None,
        response_len: int,
        student_cut: Cut = NO_CUT,
    ) -> TeacherContext:
        """x_q for the response of `agent` at `turn`; `student_cut` is the cut the rollout gave u."""
        budget = self.max_length - response_len
        if budget < 2:
            raise ValueError(
                f"teacher.max_context_length={self.max_length} leaves {budget} context tokens for a response of "
                f"{response_len} tokens; it must exceed the rollout's response length by at least 2"
            )
        seat = episode.agent(agent)
        block = self._block(episode, agent, turn, attribution)
        privileged = self._privileged(episode, block)
        ids, cut = self.encoder.fitted(episode, seat, turn, budget, role, privileged, at_least=student_cut)
        has_reference = self.reference and reference_block(episode.problem) is not None
        return TeacherContext(ids=ids, privileged=block is not None, cut_tokens=cut.count, reference=has_reference)
