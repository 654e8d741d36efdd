"""The token ids of a turn's context, for the student (u) and for the teacher (x_q): where the role
condition goes, where the privileged block p_t goes, and the one truncation rule both follow.

A workflow renders [system: role instruction, user: observation] (`Workflow.render`); the
observation is the problem followed by the history (earlier outputs, execution reports). The
layout arranges the messages (p_t goes at the end of the observation):

    role_first   [instruction_q, observation ⊕ p_t]    (the workflow's own order)
    role_last    [observation ⊕ p_t, instruction_q]    (the role condition after the shared part)

A chat template that inserts a default system message before a leading user message (SmolLM2's)
would give role_last two system messages, its default and instruction_q; under such a template
role_last sends instruction_q as a user message after the observation, so the context holds one
system message (`verl_masopd.tokens.chat.inserts_default_system`).

Without p_t, x_r is u in either layout. Under role_last every role condition q of one response
shares the whole observation and p_t as a token prefix, which a key/value cache (or a server's
prefix cache) computes once; under role_first they share only the chat template's first tokens.

Truncation rule (docs/method.md, "Decisions on points the sources leave open"): a context longer
than its budget loses tokens from the middle of its history; the role instruction, the problem and
the end of the context (the latest report, p_t, the generation prompt) stay. The history is found by
comparing the context's ids with those of the same context at turn 0 (no history): their common
leading tokens are the head, their common trailing tokens the tail, the rest the history. A cut is
`Cut(start, count)`: `count` history tokens dropped starting `start` tokens into the history. The
student's cut of u (budget `data.max_prompt_length`) is applied unchanged to every teacher context
of the same turn, so x_r without p_t is exactly u; the teacher cuts further only when x_q + y would
still exceed `teacher.max_context_length`. A context whose head and tail alone exceed the budget is
cut in its middle (`Cut.overflow`); then the teacher cuts its own contexts alike, and x_r without
p_t may differ from u.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_masopd.tokens.chat import encode_messages, inserts_default_system
from verl_masopd.workflows.base import Agent, Episode, Workflow

LAYOUTS = ("role_first", "role_last")


@dataclass(frozen=True)
class Cut:
    """`count` tokens dropped from position `start` of the history (of the whole context if `overflow`)."""

    start: int = 0
    count: int = 0
    overflow: bool = False


NO_CUT = Cut()


def arrange(
    messages: list[dict], layout: str, privileged: str | None = None, default_system: bool = False
) -> list[dict]:
    """The rendered messages in `layout`, with p_t appended to the observation's last message.

    The role condition is the rendered system message(s); the observation is the rest. With
    `default_system` (the template inserts its own system message before a leading user message)
    role_last gives the role condition as user message(s)."""
    if layout not in LAYOUTS:
        raise ValueError(f"workflow.context_layout={layout!r}; choose one of {list(LAYOUTS)}")
    instruction = [dict(m) for m in messages if m["role"] == "system"]
    observation = [dict(m) for m in messages if m["role"] != "system"]
    if not observation:
        raise ValueError(f"a rendered turn needs an observation message, got roles {[m['role'] for m in messages]}")
    if privileged:
        observation[-1]["content"] = f"{observation[-1]['content']}\n\n{privileged}"
    if layout == "role_first":
        return instruction + observation
    if default_system:
        instruction = [{**m, "role": "user"} for m in instruction]
    return observation + instruction


def history_span(ids: list[int], base: list[int]) -> tuple[int, int]:
    """(start, end) of the history in `ids`, given `base`, the same context without history."""
    head = len(os.path.commonprefix([ids, base]))
    limit = min(len(ids), len(base)) - head
    tail = 0
    while tail < limit and ids[-1 - tail] == base[-1 - tail]:
        tail += 1
    return head, len(ids) - tail


def middle_cut(span: tuple[int, int], count: int) -> Cut:
    """`count` tokens from the middle of a history span: keep ⌊(n − count)/2⌋ tokens before the gap."""
    return Cut((span[1] - span[0] - count) // 2, count)


def apply_cut(ids: list[int], span: tuple[int, int], cut: Cut) -> list[int]:
    if cut.count == 0:
        return list(ids)
    start = cut.start if cut.overflow else span[0] + cut.start
    return list(ids[:start]) + list(ids[start + cut.count :])


class ContextEncoder:
    """Encodes the contexts of recorded turns with the students' chat encoding (`verl_masopd.tokens.chat`)."""

    def __init__(self, workflow: Workflow, tokenizer, layout: str = "role_first"):
        arrange([{"role": "user", "content": ""}], layout)
        self.workflow = workflow
        self.tokenizer = tokenizer
        self.layout = layout
        self.default_system = inserts_default_system(tokenizer)

    def arrange(self, rendered: list[dict], privileged: str | None = None) -> list[dict]:
        """`rendered` in this encoder's layout, for its tokenizer's chat template."""
        return arrange(rendered, self.layout, privileged, self.default_system)

    def ids(
        self, episode: Episode, agent: Agent, turn: int, role: str | None = None, privileged: str | None = None
    ) -> list[int]:
        """The whole context's ids (no truncation)."""
        rendered = self.workflow.render(episode, agent, turn, role=role or agent.role)
        return encode_messages(self.tokenizer, self.arrange(rendered, privileged))

    def span(
        self, ids: list[int], episode: Episode, agent: Agent, turn: int, role: str | None, privileged: str | None
    ) -> tuple[int, int]:
        """The history span of `ids`, the context of these arguments."""
        if turn == 0:
            return len(ids), len(ids)
        return history_span(ids, self.ids(episode, agent, 0, role, privileged))

    def fitted(
        self,
        episode: Episode,
        agent: Agent,
        turn: int,
        budget: int | None,
        role: str | None = None,
        privileged: str | None = None,
        at_least: Cut = NO_CUT,
    ) -> tuple[list[int], Cut]:
        """The context's ids under the truncation rule for `budget` (None: no limit), and its cut."""
        ids = self.ids(episode, agent, turn, role, privileged)
        if (budget is None or len(ids) <= budget) and at_least.count == 0:
            return ids, NO_CUT
        span = self.span(ids, episode, agent, turn, role, privileged)
        cut = fit(ids, span, budget, at_least)
        return apply_cut(ids, span, cut), cut

    def student(self, episode: Episode, agent: Agent, turn: int, budget: int | None) -> tuple[list[int], Cut]:
        """u under the truncation rule for `budget` tokens (None: no limit), and its cut."""
        return self.fitted(episode, agent, turn, budget)


def fit(ids: list[int], span: tuple[int, int], budget: int | None, at_least: Cut = NO_CUT) -> Cut:
    """The cut that brings `ids` within `budget`: `at_least` (the student's cut) if that suffices, else
    a larger one from the middle of the history, else (head and tail alone too long) from the middle
    of the whole context."""
    excess = 0 if budget is None else len(ids) - budget
    if excess <= at_least.count and not at_least.overflow:
        return at_least
    excess = max(excess, at_least.count)
    if excess <= span[1] - span[0]:
        return middle_cut(span, excess)
    return Cut((len(ids) - excess) // 2, excess, overflow=True)
