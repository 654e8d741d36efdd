"""Demonstrations for pretraining the tiny world's models: every role at every turn, rendered by the
workflow's own prompt rendering (compact style), so the models learn on exactly the contexts
rollouts produce.

One demonstration (prompt messages, reply text) for the math workflow, drawn from an rng:
  - turn 0 (half of them): the problem alone; the reply is the role's answer
    (Reasoner `#### y*`, Tool-User a ```python block printing e).
  - turn 1: a first turn that ended in a disagreement is simulated (each role's first output
    right or wrong, never both right, two wrong answers never equal), executed and reported by
    the workflow (`MathWorkflow.report`, `record`); the reply is decision-first: `hold` and the
    same output when the agent's first output was right, else `revise` and the right one. Half
    of these contexts carry the PAC privileged block as `teacher/` renders it (the attribution of
    the first turn), so the teacher learns to read the verdicts.
The reply of a Reasoner at turn 0 of a student demonstration may be written in the Tool-User's
format (`role_confusion`, the share of such replies), a weakness that role-conditioned distillation
should remove.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.tiny_world.math_tasks import HELDOUT_START, MathTask, evaluate, task
from verl_masopd.workflows.base import HOLD, REVISE, Episode
from verl_masopd.workflows.math import REASONER, TOOL_USER, MathWorkflow
from verl_masopd.workflows.problem import MATH, Problem

FIRST_TURN_SHARE = 0.5
PRIVILEGED_SHARE = 0.5
REASONER_RIGHT = 0.5
TOOL_USER_RIGHT = 0.6


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
        if rng.random() < FIRST_TURN_SHARE:
            messages = self.workflow.render(episode, agent, 0)
            confused = agent.role == REASONER and rng.random() < self.role_confusion
            reply = tool_user_reply(t.expression) if agent.role == TOOL_USER or confused else reasoner_reply(t.answer)
            return Demonstration(t, messages, reply)
        first = self._first_turn(episode, t, rng)
        if rng.random() < PRIVILEGED_SHARE:
            attribution = self.workflow.attribute(episode, 0)
            messages, _ = self.contexts.messages(episode, agent.name, 1, agent.role, attribution)
        else:
            messages = self.workflow.render(episode, agent, 1)
        right, output = first[agent.name]
        if agent.role == REASONER:
            answer = output if right else t.answer
            reply = reasoner_reply(answer)
        else:
            reply = tool_user_reply(output if right else t.expression)
        return Demonstration(t, messages, f"{HOLD if right else REVISE}\n{reply}")

    def _first_turn(self, episode: Episode, t: MathTask, rng: random.Random) -> dict:
        """Record a first turn that ended in a disagreement; per agent (right, its output)."""
        reasoner_right = rng.random() < REASONER_RIGHT
        tool_user_right = not reasoner_right and rng.random() < TOOL_USER_RIGHT / (1 - REASONER_RIGHT)
        expression = t.expression if tool_user_right else wrong_expression(t, rng)
        printed = evaluate(expression)
        answer = t.answer if reasoner_right else wrong_answer(t, rng)
        while answer == printed:
            answer = wrong_answer(t, rng)
        reasoner, tool_user = episode.agents
        actions = {
            reasoner.name: self.workflow.parse(reasoner, reasoner_reply(answer)),
            tool_user.name: self.workflow.parse(tool_user, tool_user_reply(expression)),
        }
        agents = {
            reasoner.name: {
                "answer": str(answer),
                "correct": reasoner_right,
                "verdict": reasoner_right,
                "reason": None,
            },
            tool_user.name: {
                "run": True,
                "output": f"{printed}\n",
                "failure": None,
                "answer": str(printed),
                "correct": tool_user_right,
                "verdict": tool_user_right,
            },
        }
        report = self.workflow.report(agents, actions, False)
        pairs = [{"reasoner": reasoner.name, "tool_user": tool_user.name, "agree": False}]
        self.workflow.record(episode, actions, report, False, {"agents": agents, "pairs": pairs})
        return {reasoner.name: (reasoner_right, answer), tool_user.name: (tool_user_right, expression)}
