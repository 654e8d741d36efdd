"""Demonstrations of the tiny world's code family for pretraining: every role at every turn, rendered
by the Coder–Tester workflow's own prompt rendering (compact style).

One demonstration (prompt messages, reply text) drawn from an rng:
  - turn 0 (half of them): the problem alone; the Coder's reply is the family's reference program
    in a ```python block, the Tester's a small input and its correct output f(input) in ```input
    and ```output blocks.
  - turn 1: a first turn that ended in a disagreement is simulated (the Coder's program right with
    probability CODER_RIGHT, else a wrong one; the Tester's declared output right with
    TESTER_RIGHT, independently; draws where the program's output on the test input equals the
    declared one are redrawn), recorded with the workflow's own report (`CodeWorkflow.report`,
    `record`). Writing a program for a known statement is more reliable than computing an output
    by hand, so after a disagreement the Coder is usually the one that is right. The reply is
    decision-first: `hold` and the same output when the agent's first output was right, else
    `revise` and the right one (the reference program; the same input with its correct output).
    Half of these contexts carry the PAC privileged block as `teacher/` renders it.
A wrong program is another family's program on the same kind of input, or the family's with
another parameter; its verdict is computed from the golden tests (False: it fails at least one).
With `role_confusion` = c > 0 (the student's demonstrations), a share c of the Coder's replies at
every turn is written in the Tester's format (a weakness for role-conditioned distillation to
remove).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.tiny_world.code_tasks import FAMILIES, LETTERS, CodeTask, Family, random_input, task
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.workflows.base import HOLD, REVISE, Episode
from verl_masopd.workflows.code import CODER, TESTER, CoderEvidence, CodeWorkflow, TesterEvidence
from verl_masopd.workflows.problem import CODE, Problem, TestCase

FIRST_TURN_SHARE = 0.5
PRIVILEGED_SHARE = 0.5
CODER_RIGHT = 0.8
TESTER_RIGHT = 0.5
TRIES = 32


@dataclass(frozen=True)
class Demonstration:
    task: CodeTask
    messages: list[dict]
    reply: str


@dataclass(frozen=True)
class Program:
    """A Coder's program: a family with parameters (k, c)."""

    family: Family
    k: int
    c: str

    @property
    def text(self) -> str:
        return self.family.program.format(k=self.k, c=self.c)

    def run(self, line: str) -> str:
        return self.family.compute(line, self.k, self.c)


def coder_reply(program: Program) -> str:
    return f"```python\n{program.text}\n```"


def tester_reply(line: str, output: str) -> str:
    return f"```input\n{line}\n```\n```output\n{output}\n```"


def passes(t: CodeTask, program: Program) -> bool:
    return all(program.run(case.input.strip()) == case.output.strip() for case in t.tests)


def wrong_program(t: CodeTask, rng: random.Random) -> Program:
    """Another family's program on the same kind of input, or this family's with another k or c."""
    others = [f for f in FAMILIES if f.kind == t.family.kind and f is not t.family]
    if "{" in t.family.program and rng.random() < 0.5:
        return Program(
            t.family, rng.choice([k for k in range(1, 10) if k != t.k]), rng.choice(LETTERS.replace(t.c, ""))
        )
    return Program(rng.choice(others), t.k, t.c)


class CodeDemonstrations:
    """Draws demonstrations of training problems [0, HELDOUT_START) for the compact code workflow."""

    def __init__(self, tokenizer, role_confusion: float = 0.0):
        self.workflow = CodeWorkflow(1, 2, prompt_style="compact")
        self.contexts = TeacherContextBuilder(self.workflow, tokenizer, max_length=4096)
        self.role_confusion = role_confusion

    def draw(self, rng: random.Random) -> Demonstration:
        t = task(rng.randrange(HELDOUT_START))
        problem = Problem(
            uid=f"tiny-code-{t.index}",
            domain=CODE,
            statement=t.statement,
            tests=t.tests,
            reference_solution=t.reference,
        )
        episode = self.workflow.reset(problem)
        agent = episode.agents[rng.randrange(len(episode.agents))]
        right = Program(t.family, t.k, t.c)
        confused = agent.role == CODER and rng.random() < self.role_confusion
        if rng.random() < FIRST_TURN_SHARE:
            messages = self.workflow.render(episode, agent, 0)
            return Demonstration(
                t, messages, self._tester_answer(t, rng) if confused or agent.role == TESTER else coder_reply(right)
            )
        first = self._first_turn(episode, t, rng)
        if rng.random() < PRIVILEGED_SHARE:
            attribution = self.workflow.attribute(episode, 0)
            messages, _ = self.contexts.messages(episode, agent.name, 1, agent.role, attribution)
        else:
            messages = self.workflow.render(episode, agent, 1)
        was_right, output = first[agent.name]
        if confused:
            reply = self._tester_answer(t, rng)
        elif agent.role == CODER:
            reply = coder_reply(output if was_right else right)
        else:
            line, declared = output
            reply = tester_reply(line, declared if was_right else t.output(line))
        return Demonstration(t, messages, f"{HOLD if was_right else REVISE}\n{reply}")

    @staticmethod
    def _tester_answer(t: CodeTask, rng: random.Random) -> str:
        line = random_input(t.family.kind, rng, small=True)
        return tester_reply(line, t.output(line))

    def _first_turn(self, episode: Episode, t: CodeTask, rng: random.Random) -> dict:
        """Record a first turn that ended in a disagreement; per agent (right, its output)."""
        coder_right = tester_right = True
        while coder_right and tester_right:  # a right program and a right test agree: no second turn
            coder_right, tester_right = rng.random() < CODER_RIGHT, rng.random() < TESTER_RIGHT
        for _ in range(TRIES):
            program = Program(t.family, t.k, t.c) if coder_right else wrong_program(t, rng)
            line = random_input(t.family.kind, rng, small=True)
            declared = t.output(line) if tester_right else wrong_program(t, rng).run(line)
            printed = program.run(line)
            if (
                passes(t, program) == coder_right
                and (declared == t.output(line)) == tester_right
                and printed != declared
            ):
                break
        else:
            raise RuntimeError(f"no disagreeing first turn found for code problem {t.index} in {TRIES} tries")
        coder, tester = episode.agents
        actions = {
            coder.name: self.workflow.parse(coder, coder_reply(program)),
            tester.name: self.workflow.parse(tester, tester_reply(line, declared)),
        }
        passed = sum(program.run(case.input.strip()) == case.output.strip() for case in t.tests)
        agents = {
            coder.name: CoderEvidence(
                verdict=coder_right,
                build=True,
                run=True,
                passed=passed,
                total=len(t.tests),
                reason=None,
                visible_outputs=(printed,),
            ),
            tester.name: TesterEvidence(
                verdict=tester_right, well_formed=True, valid=True, spec=tester_right, reason=None
            ),
        }
        case = TestCase(f"{line}\n", f"{declared}\n")
        pair = {"match": False, "output": f"{printed}\n", "failure": None, "signature": printed}
        report = self.workflow.report(actions, {tester.name: (case, None)}, {(coder.name, tester.name): pair}, False)
        pairs = [{"coder": coder.name, "tester": tester.name, **pair}]
        self.workflow.record(episode, actions, report, False, {"agents": agents, "pairs": pairs})
        return {coder.name: (coder_right, program), tester.name: (tester_right, (line, declared))}
