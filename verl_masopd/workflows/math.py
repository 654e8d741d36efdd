"""The Reasoner–Tool-User workflow for math problems (paper Table 3; docs/method.md, "The multi-agent systems").

One turn: every Reasoner states an answer after '####'; every Tool-User writes a program (the
last ```python block) that prints the answer, which is run and its printed answer parsed. The
pair (reasoner, tool user) agrees when the two answers are equivalent under math-verify;
agreement = every pair agrees; it ends the episode. The report every agent sees next turn lists
each Reasoner's answer and each program's output (or error string) with the answer read from it.

Submission: the Reasoners' answers of the last turn; with n > 1 Reasoners, the answer the most
Reasoners give (equivalence classes under math-verify, formed in agent order), ties to the lowest
Reasoner index. A math episode yields an answer even when every program fails.

Attribution verdicts: each agent's answer checked against y* (False when it gave none, None when
the problem has no reference answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_masopd.sandbox import ExecResult
from verl_masopd.verify import extract_hash_answer, extract_program_answer, math_equal
from verl_masopd.verify.answer_rule import answer_matches
from verl_masopd.workflows.base import Action, Agent, Episode, Turn
from verl_masopd.workflows.consensus import majority
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.execution import JobBatch, failure, program_output
from verl_masopd.workflows.parsing import shown, unusable_reason
from verl_masopd.workflows.problem import MATH, Problem
from verl_masopd.workflows.prompted import COMPACT, PromptedWorkflow, parse_program

REASONER, TOOL_USER = "reasoner", "tool_user"

REASONER_INSTRUCTION = """You are the Reasoner in a team of two roles, Reasoner and Tool-User, that solves a math problem together.
Solve the problem by step-by-step mathematical reasoning, without running code.
After each turn you see the Tool-User's latest program, what it printed and the answer read from it. When your answers disagree, decide who is wrong: revise your answer if it is wrong, keep it if it is right.
End your reply with the final answer on its own line in the form `#### <answer>`."""

TOOL_USER_INSTRUCTION = """You are the Tool-User in a team of two roles, Reasoner and Tool-User, that solves a math problem together.
Solve the problem by writing a Python 3 program that computes the answer and prints only the final answer.
After each turn you see what your program printed and the Reasoner's latest answer. When your answers disagree, decide who is wrong: fix your program if it is wrong, keep it if it is right.
End your reply with your complete program in one ```python block. Only the last ```python block of your reply is run."""

# workflow.prompt_style=compact: the same roles and formats, tersely; after a disagreement the
# reply states its decision first (hold or revise), then the answer.
COMPACT_REASONER_INSTRUCTION = "Reasoner. Answer as #### n. After a disagreement say hold or revise first."
COMPACT_TOOL_USER_INSTRUCTION = (
    "Tool-User. Write a ```python program that prints the answer. After a disagreement say hold or revise first."
)


@dataclass(frozen=True)
class ReasonerEvidence(Evidence):
    """A Reasoner's answer at one turn, checked against y*.

    Reward 0.2·format + 0.8·answer. format: a '####' answer is present; answer: `answer` ≡ y*
    (`correct`). Mask: y* exists (`correct` is None without it). `reason`: why no answer was
    parsed, or None.
    """

    WEIGHTS = {"format": 0.2, "answer": 0.8}

    answer: str | None
    correct: bool | None
    reason: str | None

    def terms(self) -> dict[str, float] | None:
        if self.correct is None:
            return None
        return {"format": float(self.answer is not None), "answer": float(self.correct)}


@dataclass(frozen=True)
class ToolUserEvidence(Evidence):
    """A Tool-User's program at one turn: its run, the answer read from it, checked against y*.

    Reward 0.1·run + 0.1·parse + 0.8·answer. run: the program finishes cleanly; parse: an answer
    is recovered from the output of a clean run (none from a failed one: docs/method.md,
    "Decisions on points the sources leave open"); answer: `answer` ≡ y* (`correct`). Mask: y*
    exists (`correct` is None without it, or when the sandbox failed to carry out the run).
    `output`: what the program printed, clipped (None without a program); `failure`: why the run
    failed, or None.
    """

    WEIGHTS = {"run": 0.1, "parse": 0.1, "answer": 0.8}

    run: bool
    output: str | None
    failure: str | None
    answer: str | None
    correct: bool | None

    def terms(self) -> dict[str, float] | None:
        if self.correct is None:
            return None
        return {"run": float(self.run), "parse": float(self.answer is not None), "answer": float(self.correct)}


def parse_answer(agent: Agent, text: str) -> Action:
    """The answer after the last '####' as field "answer"."""
    reason = unusable_reason(text)
    if reason:
        return Action(agent, text, {}, reason)
    answer = extract_hash_answer(text)
    if answer is None:
        return Action(agent, text, {}, "no '#### <answer>' line")
    return Action(agent, text, {"answer": answer})


def answer_correct(answer: str | None, problem: Problem) -> bool | None:
    """1[answer ≡ y*] under the problem's answer rule; None when there is no reference answer;
    False when there is no answer."""
    if problem.answer is None:
        return None
    return answer is not None and answer_matches(answer, problem.answer, problem.answer_rule)


def reasoner_evidence(action: Action, problem: Problem) -> ReasonerEvidence:
    answer = action.fields.get("answer")
    correct = answer_correct(answer, problem)
    return ReasonerEvidence(verdict=correct, answer=answer, correct=correct, reason=action.error)


def tool_user_evidence(action: Action, run: ExecResult | None, problem: Problem, shown_chars: int) -> ToolUserEvidence:
    """Run, parse and answer checks of a Tool-User's program; `run` is None when it wrote none.
    An answer is read only from a run that finished cleanly: a crash, a timeout or a non-zero exit
    gives no answer, whatever it printed (docs/method.md, "Decisions on points the sources leave open").
    A run the sandbox itself failed to carry out (`infrastructure_failure`) gives no answer and no
    verdict: its reward terms are masked. The printed output is kept for the report, clipped to
    `shown_chars`."""
    if run is None:
        correct = answer_correct(None, problem)
        return ToolUserEvidence(
            verdict=correct,
            run=False,
            output=None,
            failure=f"no program to run: {action.error}",
            answer=None,
            correct=correct,
        )
    output = program_output(run)
    answer = None if output is None else extract_program_answer(output)
    # a run the sandbox itself lost says nothing about the program: no verdict, its terms masked
    correct = None if run.infrastructure_failure else answer_correct(answer, problem)
    return ToolUserEvidence(
        verdict=correct,
        run=output is not None,
        output=shown(run.stdout, shown_chars),
        failure=failure(run),
        answer=answer,
        correct=correct,
    )


def math_submission(turn: Turn, reasoners: list[Agent]) -> tuple[str | None, float]:
    """The answer the last turn submits (majority of equivalent answers, module doc) and the team
    signal of D.4: 1[ŷ ≡ y*]."""
    answers = [(r.name, turn.verifier["agents"][r.name].answer) for r in reasoners]
    name = majority([(n, a) for n, a in answers if a is not None], math_equal)
    if name is None:
        return None, 0.0
    evidence = turn.verifier["agents"][name]
    return evidence.answer, float(bool(evidence.correct))


class MathDomainWorkflow(PromptedWorkflow):
    """What every math workflow shares: the timeout of a program run, the submission rule."""

    domain = MATH
    default_timeout = 20.0

    def submit(self, episode: Episode) -> tuple[str | None, float]:
        return math_submission(episode.turns[-1], self.agents_of(REASONER))


class MathWorkflow(MathDomainWorkflow):
    name = "mas"
    roles = (REASONER, TOOL_USER)
    instructions = {REASONER: REASONER_INSTRUCTION, TOOL_USER: TOOL_USER_INSTRUCTION}
    role_evidence = {REASONER: ReasonerEvidence, TOOL_USER: ToolUserEvidence}
    compact_instructions = {REASONER: COMPACT_REASONER_INSTRUCTION, TOOL_USER: COMPACT_TOOL_USER_INSTRUCTION}

    def parse(self, agent: Agent, text: str) -> Action:
        return parse_answer(agent, text) if agent.role == REASONER else parse_program(agent, text)

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        self.check_actions(episode, actions)
        problem = episode.problem
        reasoners, tool_users = self.agents_of(REASONER), self.agents_of(TOOL_USER)
        batch = JobBatch()
        programs = {u.name: actions[u.name].fields.get("code") for u in tool_users}
        jobs = {name: batch.add(code, "") for name, code in programs.items() if code is not None}
        results = batch.run(self.timeout)

        agents = {r.name: reasoner_evidence(actions[r.name], problem) for r in reasoners}
        for u in tool_users:
            run = results[jobs[u.name]] if u.name in jobs else None
            agents[u.name] = tool_user_evidence(actions[u.name], run, problem, self.shown_chars)
        pairs = [
            {
                "reasoner": r.name,
                "tool_user": u.name,
                "agree": _equivalent(agents[r.name].answer, agents[u.name].answer),
            }
            for r in reasoners
            for u in tool_users
        ]
        agreed = all(p["agree"] for p in pairs)
        report = self.report(agents, actions, agreed)
        return self.record(episode, actions, report, agreed, {"agents": agents, "pairs": pairs})

    def report(
        self, agents: dict[str, ReasonerEvidence | ToolUserEvidence], actions: dict[str, Action], agreed: bool
    ) -> str:
        """What every agent sees next turn: every answer, every program's output or error."""
        if self.prompt_style == COMPACT:
            return _compact_report(agents, self.agents_of(REASONER), self.agents_of(TOOL_USER), agreed)
        lines = []
        for r in self.agents_of(REASONER):
            answer = agents[r.name].answer
            lines.append(
                f"{r.name}'s answer: {shown(answer, 200)}"
                if answer is not None
                else f"{r.name} gave no answer: {actions[r.name].error}."
            )
        for u in self.agents_of(TOOL_USER):
            ev = agents[u.name]
            if ev.output is None:
                lines.append(f"{u.name} gave no program to run: {actions[u.name].error}.")
                continue
            if ev.failure is not None:
                lines.append(f"{u.name}'s program failed: {ev.failure}")
            if ev.output.strip():
                lines.append(f"{u.name}'s program printed:\n```output\n{ev.output.rstrip()}\n```")
            else:
                lines.append(f"{u.name}'s program printed nothing.")
            if ev.answer is not None:
                lines.append(f"Answer read from it: {shown(ev.answer, 200)}")
            elif ev.failure is not None:
                lines.append("A failed run gives no answer.")
            else:
                lines.append("No answer could be read from its output.")
        lines.append("All answers agree." if agreed else "The answers disagree.")
        return "\n".join(lines)


def _compact_report(
    agents: dict[str, ReasonerEvidence | ToolUserEvidence],
    reasoners: list[Agent],
    tool_users: list[Agent],
    agreed: bool,
) -> str:
    """The report in one line: each Reasoner's answer, each program's answer or failure, agree or not."""
    parts = [f"{r.name} {_terse(agents[r.name].answer)}" for r in reasoners]
    for u in tool_users:
        ev = agents[u.name]
        parts.append(f"{u.name} failed" if ev.failure is not None else f"{u.name} {_terse(ev.answer)}")
    return ", ".join(parts) + (", agree" if agreed else ", disagree")


def _terse(answer: str | None) -> str:
    return "none" if answer is None else shown(answer, 40)


def _equivalent(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and math_equal(a, b)
