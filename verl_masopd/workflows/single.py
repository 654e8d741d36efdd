"""Single-agent baselines: SA+ST (horizon 1) and SA+MT (horizon T) with the self-consistency stop.

The agent (the Coder for code, the Reasoner for math) sees the problem and, after the first turn,
its own previous output to revise; there is no second role and no execution feedback, so the
report is empty. A turn is "agreed" (the episode stops) when every agent's output is
self-consistent with its own output of the turn before:
  math: the two consecutive answers are equivalent under math-verify;
  code: the two consecutive programs finish cleanly on every public example of the problem and
        print identical whitespace-normalised outputs; a problem without public examples falls
        back to the two programs being the same text up to whitespace at line ends.
Golden tests are run every turn for the verifier only; D.4 rewards and the submission follow the
corresponding two-role workflow (code.py, math.py). Attribution does not apply: no conflict
between roles can arise.
"""

from __future__ import annotations

from abc import abstractmethod

from verl_masopd.verify import math_equal
from verl_masopd.workflows.base import Action, Agent, Attribution, Episode, Turn
from verl_masopd.workflows.code import (
    CODER,
    COMPACT_CODER_INSTRUCTION,
    CodeDomainWorkflow,
    CoderEvidence,
    coder_evidence,
)
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.execution import JobBatch, output_signature, runnable
from verl_masopd.workflows.math import (
    COMPACT_REASONER_INSTRUCTION,
    REASONER,
    MathDomainWorkflow,
    ReasonerEvidence,
    parse_answer,
    reasoner_evidence,
)
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.prompted import PromptedWorkflow, parse_program

SA_CODER_INSTRUCTION = """You are an expert programmer solving a programming problem.
Write a complete Python 3 program that solves the problem: it reads the input from standard input and prints the answer to standard output (for a call-based problem, it defines the function the problem names).
If you are shown your previous output, check it carefully: fix the program if it is wrong, keep it as it is if it is right.
End your reply with your complete program in one ```python block. Only the last ```python block of your reply is run."""

SA_REASONER_INSTRUCTION = """You are an expert mathematician solving a math problem.
Solve the problem by step-by-step mathematical reasoning.
If you are shown your previous output, check it carefully: revise your answer if it is wrong, keep it if it is right.
End your reply with the final answer on its own line in the form `#### <answer>`."""


class SingleAgentWorkflow(PromptedWorkflow):
    """One role; the episode stops on self-consistency or at the horizon (module doc)."""

    name = "sa"

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        self.check_actions(episode, actions)
        agents = self.evidence(episode.problem, actions)
        agreed = bool(episode.turns) and all(
            self.consistent(
                episode.turns[-1].actions[a.name],
                episode.turns[-1].verifier["agents"][a.name],
                actions[a.name],
                agents[a.name],
            )
            for a in self.agents
        )
        return self.record(episode, actions, "", agreed, {"agents": agents})

    def attribute(self, episode: Episode, turn: int) -> Attribution | None:
        return None

    @abstractmethod
    def evidence(self, problem: Problem, actions: dict[str, Action]) -> dict[str, Evidence]:
        """Per-agent verifier evidence of one turn."""

    @abstractmethod
    def consistent(self, before: Action, before_evidence: Evidence, now: Action, now_evidence: Evidence) -> bool:
        """Whether an agent's output `now` is self-consistent with its output `before`."""


class SingleAgentCodeWorkflow(SingleAgentWorkflow, CodeDomainWorkflow):
    roles = (CODER,)
    instructions = {CODER: SA_CODER_INSTRUCTION}
    role_evidence = {CODER: CoderEvidence}
    compact_instructions = {CODER: COMPACT_CODER_INSTRUCTION}

    def parse(self, agent: Agent, text: str) -> Action:
        return parse_program(agent, text)

    def evidence(self, problem: Problem, actions: dict[str, Action]) -> dict[str, CoderEvidence]:
        batch = JobBatch()
        golden, public = {}, {}
        for a in self.agents:
            code = actions[a.name].fields.get("code")
            if code is not None:
                program = runnable(code, problem.fn_name)
                golden[a.name] = [batch.add(program, t.input) for t in problem.tests]
                public[a.name] = [batch.add(program, t.input) for t in problem.public_tests]
        results = batch.run(self.timeout)
        return {
            a.name: coder_evidence(
                problem,
                actions[a.name],
                [results[i] for i in golden.get(a.name, [])],
                [output_signature(results[i]) for i in public.get(a.name, [])],
                self.smoke_tests,
                self.float_tol,
            )
            for a in self.agents
        }

    def consistent(
        self, before: Action, before_evidence: CoderEvidence, now: Action, now_evidence: CoderEvidence
    ) -> bool:
        if "code" not in before.fields or "code" not in now.fields:
            return False
        before_outputs, now_outputs = before_evidence.visible_outputs, now_evidence.visible_outputs
        if before_outputs:
            return None not in before_outputs and before_outputs == now_outputs
        return _lines(before.fields["code"]) == _lines(now.fields["code"])


class SingleAgentMathWorkflow(SingleAgentWorkflow, MathDomainWorkflow):
    roles = (REASONER,)
    instructions = {REASONER: SA_REASONER_INSTRUCTION}
    role_evidence = {REASONER: ReasonerEvidence}
    compact_instructions = {REASONER: COMPACT_REASONER_INSTRUCTION}

    def parse(self, agent: Agent, text: str) -> Action:
        return parse_answer(agent, text)

    def evidence(self, problem: Problem, actions: dict[str, Action]) -> dict[str, ReasonerEvidence]:
        return {a.name: reasoner_evidence(actions[a.name], problem) for a in self.agents}

    def consistent(
        self, before: Action, before_evidence: ReasonerEvidence, now: Action, now_evidence: ReasonerEvidence
    ) -> bool:
        a, b = before_evidence.answer, now_evidence.answer
        return a is not None and b is not None and math_equal(a, b)


def _lines(code: str) -> list[str]:
    return [line.rstrip() for line in code.strip().splitlines()]
