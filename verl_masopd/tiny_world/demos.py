"""Demonstrations for pretraining the tiny world's models: every role at every turn, rendered by the
workflow's own prompt rendering (compact style), so the models learn on exactly the contexts
rollouts produce.

One demonstration (prompt messages, reply text) for the math workflow, drawn from an rng:
  - turn 0 (half of them): the problem alone; the reply is the role's answer
    (Reasoner `#### y*`, Tool-User a ```python block printing e).
  - turn 1: a first turn that ended in a disagreement is simulated and reported by the workflow
    (`MathWorkflow.report`, `record`, the Reasoner's evidence from `reasoner_evidence`): the
    Reasoner's first reply is right with probability REASONER_RIGHT, gives no answer (written in
    the Tool-User's format) with REASONER_NO_ANSWER, else a wrong answer; the Tool-User's program
    is right with TOOL_USER_RIGHT, independently; draws where both agree are redrawn. Mental
    arithmetic is less reliable than a program, so after a disagreement the Tool-User is usually
    the one that is right, and a Reasoner without verdicts does best to revise to it. The reply is
    decision-first: `hold` and the same output when the agent's first output was right, else
    `revise` and the right one. Half of these contexts carry the PAC privileged block as
    `teacher/` renders it (the verdicts of the first turn), from which the right decision can be
    read off.
With `role_confusion` = c > 0 (the student's demonstrations), a share c of the Reasoner's replies
at every turn is written in the Tool-User's format (a program instead of `#### n`): a weakness
that role-conditioned distillation should remove.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.tiny_world.math_tasks import HELDOUT_START, MathTask, evaluate, task
from verl_masopd.workflows.base import HOLD, REVISE, Episode
from verl_masopd.workflows.math import REASONER, TOOL_USER, MathWorkflow, ToolUserEvidence, reasoner_evidence
from verl_masopd.workflows.problem import MATH, Problem

FIRST_TURN_SHARE = 0.4
PRIVILEGED_SHARE = 0.5
REASONER_RIGHT = 0.4
REASONER_NO_ANSWER = 0.1
TOOL_USER_RIGHT = 0.9


@dataclass(frozen=True)
class Demonstration:
    task: MathTask
    messages: list[dict]
    reply: str


def reasoner_reply(answer: int) -> str:
    return f"#### {answer}"


def tool_user_reply(expression: str) -> str:
    return f"```python\nprint({expression})\n```"


def wrong_expression(t: MathTask, rng: random.Random) -> str:
    """e with one number or operator changed so that its value differs from y* (e + 1 when no
    such change is found in a few tries, as for 0 * 0)."""
    tokens = t.expression.split()
    for _ in range(16):
        changed = list(tokens)
        k = rng.randrange(len(tokens))
        if k % 2:
            changed[k] = rng.choice([op for op in "+-*" if op != tokens[k]])
        else:
            changed[k] = str(max(0, int(tokens[k]) + rng.choice((-2, -1, 1, 2))))
        expression = " ".join(changed)
        if evaluate(expression) != t.answer:
            return expression
    return f"{t.expression} + 1"


def wrong_answer(t: MathTask, rng: random.Random) -> int:
    if rng.random() < 0.5:
        return evaluate(wrong_expression(t, rng))
    return t.answer + rng.choice((-10, -2, -1, 1, 2, 10))


class MathDemonstrations:
    """Draws demonstrations of training problems [0, HELDOUT_START) for the compact math workflow."""

    def __init__(self, tokenizer, role_confusion: float = 0.0):
        self.workflow = MathWorkflow(1, 2, prompt_style="compact")
        self.contexts = TeacherContextBuilder(self.workflow, tokenizer, max_length=4096)
        self.role_confusion = role_confusion

    def draw(self, rng: random.Random) -> Demonstration:
        t = task(rng.randrange(HELDOUT_START))
        problem = Problem(uid=f"tiny-math-{t.index}", domain=MATH, statement=t.statement, answer=str(t.answer))
        episode = self.workflow.reset(problem)
        agent = episode.agents[rng.randrange(len(episode.agents))]
        confused = agent.role == REASONER and rng.random() < self.role_confusion
        if rng.random() < FIRST_TURN_SHARE:
            messages = self.workflow.render(episode, agent, 0)
            reply = tool_user_reply(t.expression) if agent.role == TOOL_USER or confused else reasoner_reply(t.answer)
            return Demonstration(t, messages, reply)
        first = self._first_turn(episode, t, rng)
        if rng.random() < PRIVILEGED_SHARE:
            attribution = self.workflow.attribute(episode, 0)
            messages, _ = self.contexts.messages(episode, agent.name, 1, agent.role, attribution)
        else:
            messages = self.workflow.render(episode, agent, 1)
        right, output = first[agent.name]
        if confused:
            reply = tool_user_reply(t.expression)
        elif agent.role == TOOL_USER:
            reply = tool_user_reply(output if right else t.expression)
        else:
            reply = reasoner_reply(t.answer)
        return Demonstration(t, messages, f"{HOLD if right else REVISE}\n{reply}")

    def _first_turn(self, episode: Episode, t: MathTask, rng: random.Random) -> dict:
        """Record a first turn that ended in a disagreement; per agent (right, its output)."""
        reasoner, tool_user = episode.agents
        while True:
            draw = rng.random()
            reasoner_right = draw < REASONER_RIGHT
            answer = t.answer if reasoner_right else wrong_answer(t, rng)
            text = tool_user_reply(t.expression) if draw > 1 - REASONER_NO_ANSWER else reasoner_reply(answer)
            tool_user_right = rng.random() < TOOL_USER_RIGHT
            expression = t.expression if tool_user_right else wrong_expression(t, rng)
            printed = evaluate(expression)
            if text.startswith("```") or answer != printed:
                break
        actions = {
            reasoner.name: self.workflow.parse(reasoner, text),
            tool_user.name: self.workflow.parse(tool_user, tool_user_reply(expression)),
        }
        agents = {
            reasoner.name: reasoner_evidence(actions[reasoner.name], episode.problem),
            tool_user.name: ToolUserEvidence(
                verdict=tool_user_right,
                run=True,
                output=f"{printed}\n",
                failure=None,
                answer=str(printed),
                correct=tool_user_right,
            ),
        }
        report = self.workflow.report(agents, actions, False)
        pairs = [{"reasoner": reasoner.name, "tool_user": tool_user.name, "agree": False}]
        self.workflow.record(episode, actions, report, False, {"agents": agents, "pairs": pairs})
        return {
            reasoner.name: (agents[reasoner.name].correct, answer),
            tool_user.name: (tool_user_right, expression),
        }
