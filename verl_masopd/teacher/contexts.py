"""Teacher contexts x_q of METHOD.md §3: the observation u of a recorded turn, rendered under role
q's condition, plus the privileged block p_t (PAC) when turn t−1 ended in a conflict.

    x_q = encode(render(episode, agent, t, role=q) ⊕ p_t)

p_t is appended to the last message of the rendered observation, so it enters the teacher
context only (the students' contexts are `render(episode, agent, t)` as the rollout encoded
them) and every role condition of one response carries the same p_t: the RAS passes differ in
the role condition alone.

Truncation rule (`teacher.max_context_length` = L tokens for context + response): the response y is
never cut. When |x_q| + |y| > L, the context keeps a budget of b = L − |y| tokens: its first
⌊b/2⌋ tokens (the role instruction and the start of the problem) and its last b − ⌊b/2⌋ tokens
(the latest execution report, the privileged block and the assistant generation prompt); the
middle, older turns of the history, is dropped. Every truncated context is counted
(`TeacherContext.cut_tokens` > 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_masopd.chat import encode_messages
from verl_masopd.teacher.privileged import privileged_block
from verl_masopd.workflows.base import Attribution, Episode, Workflow


@dataclass(frozen=True)
class TeacherContext:
    """x_q as token ids; `privileged`: p_t is in it; `cut_tokens`: tokens the truncation rule dropped."""

    ids: list[int]
    privileged: bool
    cut_tokens: int


def fit_context(context_ids: list[int], response_len: int, max_length: int) -> tuple[list[int], int]:
    """The truncation rule above: (kept context ids, number of tokens cut)."""
    budget = max_length - response_len
    if budget < 2:
        raise ValueError(
            f"teacher.max_context_length={max_length} leaves {budget} context tokens for a response of "
            f"{response_len} tokens; it must exceed the rollout's response length by at least 2"
        )
    cut = len(context_ids) - budget
    if cut <= 0:
        return list(context_ids), 0
    head = budget // 2
    return list(context_ids[:head]) + list(context_ids[len(context_ids) - (budget - head) :]), cut


class TeacherContextBuilder:
    """Builds x_q for recorded turns with the students' chat encoding (`verl_masopd.chat`)."""

    def __init__(self, workflow: Workflow, tokenizer, max_length: int, reveal_reference: bool = False):
        if max_length < 2:
            raise ValueError(f"teacher.max_context_length must be >= 2, got {max_length}")
        self.workflow = workflow
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.reveal_reference = reveal_reference

    def messages(
        self, episode: Episode, agent: str, turn: int, role: str, attribution: Attribution | None
    ) -> tuple[list[dict], bool]:
        """(chat messages of x_q, whether p_t is in them).

        `attribution` is a^{t−1} (None: turn t−1 ended without a conflict, or PAC is off); an
        incomplete one (a check could not run) gives no block.
        """
        if attribution is not None and attribution.turn != turn - 1:
            raise ValueError(f"attribution of turn {attribution.turn} given for the context of turn {turn}")
        rendered = self.workflow.render(episode, episode.agent(agent), turn, role=role)
        messages = [dict(m) for m in rendered]
        if attribution is None or not attribution.complete:
            return messages, False
        block = privileged_block(attribution, episode, agent, self.reveal_reference)
        messages[-1]["content"] = f"{messages[-1]['content']}\n\n{block}"
        return messages, True

    def build(
        self, episode: Episode, agent: str, turn: int, role: str, attribution: Attribution | None, response_len: int
    ) -> TeacherContext:
        messages, privileged = self.messages(episode, agent, turn, role, attribution)
        ids, cut = fit_context(encode_messages(self.tokenizer, messages), response_len, self.max_length)
        return TeacherContext(ids=ids, privileged=privileged, cut_tokens=cut)
