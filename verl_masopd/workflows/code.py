"""The Coder–Tester workflow for code problems (paper Table 3; docs/method.md, "The multi-agent systems").

One turn: every Coder writes a program (the last ```python block), every Tester writes one test
case (the last ```input and ```output blocks). The environment runs each program
  - on the golden tests: read by the verifier only (pass fraction, build and smoke checks);
  - on each Tester's input: the pair (coder, tester) agrees when the program's output matches
    the Tester's declared output. Agreement = every pair agrees; it ends the episode.
and runs the reference solution on each Tester's input (the Tester's spec check). The report the
agents see next turn lists every test case, its declared output and each program's actual output
or error string. Golden tests never enter a report or a prompt.

Submission: the Coders' programs of the last turn; with n > 1 Coders, the program whose outputs
on the last turn's Tester inputs the most Coders share (identical whitespace-normalised outputs,
a failed run counting as no output); ties go to the lowest Coder index. With no usable Tester
input every program has the same (empty) signature, so the lowest-index Coder's program wins.

Attribution verdicts: a Coder is correct when its program passes every golden test (None with no
golden tests); a Tester is correct when the reference solution reproduces its declared output
(None with no reference solution; False for an ill-formed test case).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from verl_masopd.sandbox import ExecResult
from verl_masopd.verify import DEFAULT_FLOAT_TOL, outputs_agree
from verl_masopd.workflows.base import Action, Agent, Episode, Turn
from verl_masopd.workflows.consensus import majority
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.execution import (
    JobBatch,
    build_error,
    failure,
    output_signature,
    program_output,
    run_passes,
    runnable,
)
from verl_masopd.workflows.execution_matrix import ExecutionMatrix, execution_matrix
from verl_masopd.workflows.parsing import last_block, shown, unusable_reason
from verl_masopd.workflows.problem import CODE, Problem, TestCase
from verl_masopd.workflows.prompted import COMPACT, PromptedWorkflow, parse_program

CODER, TESTER = "coder", "tester"

CODER_INSTRUCTION = """You are the Coder in a team of two roles, Coder and Tester, that solves a programming problem together.
Write a complete Python 3 program that solves the problem: it reads the input from standard input and prints the answer to standard output (for a call-based problem, it defines the function the problem names).
After each turn you see the Tester's latest test case and what your program printed for it. When they disagree, decide who is wrong: fix your program if it is wrong, keep it as it is if it is right.
End your reply with your complete program in one ```python block. Only the last ```python block of your reply is run."""

TESTER_INSTRUCTION = """You are the Tester in a team of two roles, Coder and Tester, that solves a programming problem together.
Write one test case for the problem: a valid input and the exact output a correct program prints for it. Work the expected output out carefully from the problem statement.
After each turn you see the Coder's latest program and what it printed for your test case. When they disagree, decide who is wrong: correct your test case if it is wrong, keep it if it is right, or write a new test that exposes the program's mistake.
End your reply with the input in one ```input block followed by the expected output in one ```output block. Only the last block of each kind is used."""

# workflow.prompt_style=compact: the same roles and formats, tersely; after a disagreement the
# reply states its decision first (hold or revise), then the output.
COMPACT_CODER_INSTRUCTION = (
    "Coder. Write a ```python program that reads stdin and prints the answer. "
    "After a disagreement say hold or revise first."
)
COMPACT_TESTER_INSTRUCTION = (
    "Tester. Write a test: an ```input block, then the ```output block. After a disagreement say hold or revise first."
)

CALL_BASED_NOTE = """This problem is call-based: a program defines the function `{fn_name}` (at top level or as a method of class `Solution`), which is called with the arguments of each test. A test input is a JSON array of the arguments; a test output is the JSON encoding of the returned value."""


@dataclass(frozen=True)
class CoderEvidence(Evidence):
    """A Coder's program at one turn, checked on the golden tests.

    Reward 0.1·build + 0.1·run + 0.8·pass. build: the program compiles; run: the smoke subset of
    the golden tests runs without exception or timeout; pass: the golden pass fraction
    `passed` / `total`. Mask: golden tests exist (`total` > 0). `reason`: why the program is
    unusable or does not compile, or None. `visible_outputs`: its output signatures on the inputs
    agents can see (the majority submission compares them).
    """

    WEIGHTS = {"build": 0.1, "run": 0.1, "pass": 0.8}

    build: bool
    run: bool
    passed: int
    total: int
    reason: str | None
    visible_outputs: tuple[str | None, ...]

    def terms(self) -> dict[str, float] | None:
        if self.total == 0:
            return None
        return {"build": float(self.build), "run": float(self.run), "pass": self.passed / self.total}


@dataclass(frozen=True)
class TesterEvidence(Evidence):
    """A Tester's test case at one turn, checked with the reference solution.

    Reward 0.2·valid + 0.8·spec. valid: the case is well-formed, and the reference solution runs
    on its input with the same output twice (deterministic); spec: the reference reproduces the
    declared output. Mask: a reference exists (`spec` is None without one, or when the sandbox
    failed to run it). `reason`: why the case is ill-formed or fails a check, or None.
    """

    WEIGHTS = {"valid": 0.2, "spec": 0.8}

    well_formed: bool
    valid: bool | None
    spec: bool | None
    reason: str | None

    def terms(self) -> dict[str, float] | None:
        if self.spec is None:
            return None
        return {"valid": float(self.valid), "spec": float(self.spec)}


def parse_test_case(agent: Agent, text: str) -> Action:
    """The last ```input block as "test_input" and the last ```output block as "test_output"."""
    reason = unusable_reason(text)
    if reason:
        return Action(agent, text, {}, reason)
    test_input, error = last_block(text, ("input",), allow_empty=True)
    if error:
        return Action(agent, text, {}, f"test input: {error}")
    test_output, error = last_block(text, ("output",))
    if error:
        return Action(agent, text, {"test_input": test_input}, f"expected output: {error}")
    return Action(agent, text, {"test_input": test_input, "test_output": test_output})


def tester_case(action: Action, fn_name: str | None) -> tuple[TestCase | None, str | None]:
    """The Tester's test case in the problem's format, or (None, why it is unusable)."""
    if action.error:
        return None, action.error
    test_input, test_output = action.fields["test_input"], action.fields["test_output"]
    if not fn_name:
        return TestCase(test_input if test_input.endswith("\n") else test_input + "\n", test_output), None
    try:
        arguments = json.loads(test_input)
        json.loads(test_output)
    except (ValueError, RecursionError) as e:
        return None, f"call-based test case is not JSON ({e})"
    if not isinstance(arguments, list):
        return None, "call-based test input must be a JSON array of arguments"
    return TestCase(test_input.strip(), test_output.strip()), None


def coder_evidence(
    problem: Problem,
    action: Action,
    golden: list[ExecResult],
    visible_outputs: list[str | None],
    smoke_tests: int,
    float_tol: float | None,
) -> CoderEvidence:
    """The Coder's verifier record for one turn: build, smoke run, golden pass count, verdict.

    `golden` holds the program's runs on `problem.tests` (empty when it wrote no program);
    `visible_outputs` its outputs on the inputs agents can see (used for the majority submission).
    Golden runs the sandbox itself failed to carry out (`infrastructure_failure`) count in neither
    `passed` nor `total`; with none left the Coder's terms are masked and there is no verdict.
    """
    total = len(problem.tests)
    code = action.fields.get("code")
    if code is None:
        return CoderEvidence(
            verdict=False,
            build=False,
            run=False,
            passed=0,
            total=total,
            reason=action.error,
            visible_outputs=tuple(visible_outputs),
        )
    # golden runs the sandbox itself lost say nothing about the program: counted in neither total
    ran = [(r, t) for r, t in zip(golden, problem.tests, strict=True) if not r.infrastructure_failure]
    total = len(ran)
    passed = sum(run_passes(r, t.output, problem.fn_name, float_tol) for r, t in ran)
    smoke = golden[:smoke_tests]
    error = build_error(code)
    return CoderEvidence(
        verdict=passed == total if total else None,
        build=error is None,
        run=bool(smoke) and all(failure(r) is None for r in smoke),
        passed=passed,
        total=total,
        reason=error,
        visible_outputs=tuple(visible_outputs),
    )


def code_submission(turn: Turn, coders: list[Agent]) -> tuple[str | None, float]:
    """The program the last turn submits (majority by identical visible outputs, module doc) and
    the team signal of D.4: the fraction of golden tests it passes."""
    candidates = [
        (c.name, turn.verifier["agents"][c.name].visible_outputs)
        for c in coders
        if "code" in turn.actions[c.name].fields
    ]
    name = majority(candidates, operator.eq)
    if name is None:
        return None, 0.0
    evidence = turn.verifier["agents"][name]
    team = evidence.passed / evidence.total if evidence.total else 0.0
    return turn.actions[name].fields["code"], team


class CodeDomainWorkflow(PromptedWorkflow):
    """What every code workflow shares: settings, the problem text, the submission rule."""

    domain = CODE
    default_timeout = 30.0

    def __init__(
        self,
        agents_per_role: int = 1,
        horizon: int = 4,
        *,
        smoke_tests: int = 3,
        float_tol: float | None = DEFAULT_FLOAT_TOL,
        **options,
    ):
        super().__init__(agents_per_role, horizon, **options)
        if smoke_tests < 1:
            raise ValueError(f"workflow.smoke_tests must be >= 1, got {smoke_tests}")
        if float_tol is not None and not 0 <= float_tol < 1:
            raise ValueError(f"workflow.float_tol must be in [0, 1) or null (exact text), got {float_tol}")
        self.smoke_tests = smoke_tests
        self.float_tol = float_tol

    def problem_text(self, problem: Problem) -> str:
        if problem.fn_name:
            return f"{problem.statement}\n\n{CALL_BASED_NOTE.format(fn_name=problem.fn_name)}"
        return problem.statement

    def submit(self, episode: Episode) -> tuple[str | None, float]:
        return code_submission(episode.turns[-1], self.agents_of(CODER))


class CodeWorkflow(CodeDomainWorkflow):
    name = "mas"
    roles = (CODER, TESTER)
    instructions = {CODER: CODER_INSTRUCTION, TESTER: TESTER_INSTRUCTION}
    role_evidence = {CODER: CoderEvidence, TESTER: TesterEvidence}
    compact_instructions = {CODER: COMPACT_CODER_INSTRUCTION, TESTER: COMPACT_TESTER_INSTRUCTION}

    def parse(self, agent: Agent, text: str) -> Action:
        return parse_program(agent, text) if agent.role == CODER else parse_test_case(agent, text)

    def final_tests(self, episode: Episode) -> list[TestCase | None]:
        """Each Tester's test case of the episode's last turn, in agent order; None where unusable."""
        last, fn_name = episode.turns[-1], episode.problem.fn_name
        return [tester_case(last.actions[s.name], fn_name)[0] for s in self.agents_of(TESTER)]

    def execution_matrix(self, episodes: Sequence[Episode]) -> ExecutionMatrix:
        """The execution matrix of one problem's finished episodes (execution_matrix.py): episode j's
        submission against the golden tests and every episode's final test case. One Tester per
        episode."""
        if len(self.agents_of(TESTER)) != 1:
            raise ValueError(
                f"the execution matrix needs one Tester per episode (workflow.agents_per_role=1), "
                f"got {self.agents_per_role}"
            )
        programs = [self.submit(episode)[0] for episode in episodes]
        generated = [self.final_tests(episode)[0] for episode in episodes]
        return execution_matrix(episodes[0].problem, programs, generated, self.timeout, self.float_tol)

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        self.check_actions(episode, actions)
        problem, fn_name = episode.problem, episode.problem.fn_name
        coders, testers = self.agents_of(CODER), self.agents_of(TESTER)
        cases = {s.name: tester_case(actions[s.name], fn_name) for s in testers}
        programs = {c.name: actions[c.name].fields.get("code") for c in coders}

        batch = JobBatch()
        golden, on_case, reference = {}, {}, {}
        for c, code in programs.items():
            if code is not None:
                golden[c] = [batch.add(runnable(code, fn_name), t.input) for t in problem.tests]
                for s, (case, _) in cases.items():
                    if case is not None:
                        on_case[c, s] = batch.add(runnable(code, fn_name), case.input)
        if problem.reference_solution:  # twice: a valid test case is deterministic
            for s, (case, _) in cases.items():
                if case is not None:
                    program = runnable(problem.reference_solution, fn_name)
                    reference[s] = [batch.add(program, case.input, copy) for copy in (0, 1)]
        results = batch.run(self.timeout)

        pairs = {(c, s): self._pair(on_case, results, c, s, cases[s][0], fn_name) for c in programs for s in cases}
        agents = {}
        for c in coders:
            visible = [pairs[c.name, s.name]["signature"] for s in testers]
            runs = [results[i] for i in golden.get(c.name, [])]
            agents[c.name] = coder_evidence(problem, actions[c.name], runs, visible, self.smoke_tests, self.float_tol)
        for s in testers:
            runs = [results[i] for i in reference.get(s.name, [])]
            agents[s.name] = self._tester_evidence(problem, *cases[s.name], runs)
        agreed = all(p["match"] for p in pairs.values())
        report = self.report(actions, cases, pairs, agreed)
        verifier = {"agents": agents, "pairs": [{"coder": c, "tester": s, **p} for (c, s), p in pairs.items()]}
        return self.record(episode, actions, report, agreed, verifier)

    def _pair(
        self,
        on_case: dict,
        results: list[ExecResult],
        coder: str,
        tester: str,
        case: TestCase | None,
        fn_name: str | None,
    ) -> dict:
        if (coder, tester) not in on_case:
            return {"match": False, "output": None, "failure": None, "signature": None}
        result = results[on_case[coder, tester]]
        return {
            "match": run_passes(result, case.output, fn_name, self.float_tol),
            "output": shown(result.stdout, self.shown_chars),
            "failure": failure(result),
            "signature": output_signature(result),
        }

    def _tester_evidence(
        self, problem: Problem, case: TestCase | None, reason: str | None, runs: list[ExecResult]
    ) -> TesterEvidence:
        """valid: well-formed, and the reference solution runs cleanly on the input and prints the
        same output on two runs; spec: that output agrees with the declared one. A reference run
        the sandbox itself failed to carry out (`infrastructure_failure`, e.g. starved of CPU)
        leaves valid, spec and the verdict unknown, as without a reference solution."""
        lost = any(r.infrastructure_failure for r in runs)
        if not problem.reference_solution or (case is not None and lost):
            return TesterEvidence(
                verdict=None if case is not None else False,
                well_formed=case is not None,
                valid=None,
                spec=None,
                reason="the sandbox failed to run the reference solution" if lost else reason,
            )
        if case is None:
            return TesterEvidence(verdict=False, well_formed=False, valid=False, spec=False, reason=reason)
        why = next((w for w in map(failure, runs) if w is not None), None)
        outputs = [program_output(r) for r in runs]
        if why is None and outputs[0] != outputs[1]:
            why = "it prints different outputs on two runs, the test is not deterministic"
        if why is not None:
            return TesterEvidence(
                verdict=False,
                well_formed=True,
                valid=False,
                spec=False,
                reason=f"the reference solution fails on this input: {why}",
            )
        spec = outputs_agree(outputs[0], case.output, problem.fn_name, self.float_tol)
        return TesterEvidence(
            verdict=spec,
            well_formed=True,
            valid=True,
            spec=spec,
            reason=None if spec else "the reference solution prints a different output",
        )

    def report(self, actions: dict[str, Action], cases: dict, pairs: dict, agreed: bool) -> str:
        """What every agent sees next turn: each test case, its declared output, each program's result.

        `cases[tester]`: (TestCase or None, why unusable); `pairs[coder, tester]`: the pair's run.
        """
        if self.prompt_style == COMPACT:
            return self._compact_report(actions, cases, pairs, agreed)
        parts = []
        for s, (case, reason) in cases.items():
            if case is None:
                parts.append(f"{s} gave no usable test case: {reason}.")
                continue
            lines = [
                f"Test case of {s}:",
                _fenced("input", shown(case.input, self.shown_chars)),
                "Declared output:",
                _fenced("output", shown(case.output, self.shown_chars)),
            ]
            for c in self.agents_of(CODER):
                pair = pairs[c.name, s]
                if "code" not in actions[c.name].fields:
                    lines.append(f"{c.name} gave no program to run: {actions[c.name].error}.")
                elif pair["failure"] is not None:
                    lines.append(f"{c.name}'s program failed: {pair['failure']}")
                elif not pair["output"].strip():
                    lines.append(f"{c.name}'s program printed nothing.")
                else:
                    verdict = "matches" if pair["match"] else "does not match"
                    lines += [
                        f"{c.name}'s program printed:",
                        _fenced("output", pair["output"]),
                        f"This {verdict} the declared output.",
                    ]
            parts.append("\n".join(lines))
        parts.append(
            "Every program agrees with every test case." if agreed else "The programs and the test cases disagree."
        )
        return "\n\n".join(parts)

    def _compact_report(self, actions: dict[str, Action], cases: dict, pairs: dict, agreed: bool) -> str:
        """The report in one line per test case: its input, the declared output, each program's
        output (or "failed" / "none"), then agree or not."""
        parts = []
        for s, (case, _) in cases.items():
            if case is None:
                parts.append(f"{s} no test")
                continue
            results = [f"{s} in {_terse(case.input)} want {_terse(case.output)}"]
            for c in self.agents_of(CODER):
                pair = pairs[c.name, s]
                if "code" not in actions[c.name].fields:
                    results.append(f"{c.name} none")
                elif pair["failure"] is not None:
                    results.append(f"{c.name} failed")
                else:
                    results.append(f"{c.name} got {_terse(pair['output'])}")
            parts.append(", ".join(results))
        return "; ".join(parts) + ("; agree" if agreed else "; disagree")


def _terse(text: str) -> str:
    return shown(" ".join(text.split()), 40) or "nothing"


def _fenced(tag: str, text: str) -> str:
    return f"```{tag}\n{text.rstrip()}\n```"
