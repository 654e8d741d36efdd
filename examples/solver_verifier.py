"""A new multi-agent workflow in one file: a Solver–Verifier pair on math problems.

Every turn both agents act on the same state (docs/method.md, "The multi-agent systems"): the
Solver answers `#### n`; the Verifier, shown the Solver's answer of the turn before, either
accepts it with a line `agree` or gives its own `#### n`. The turn is agreed when the Verifier's
answer equals the Solver's answer of this turn (math-verify); agreement ends the episode, else it
runs to the horizon.

Rewards (D.4): the team signal is 1[Verifier's final answer ≡ y*] (the Verifier submits, as the
Reasoner does in the math workflow); both roles record the Reasoner's evidence (`role_evidence`),
so each role's local reward has its terms, 0.2·format + 0.8·answer, reweighted per role
("solver", "verifier") in `workflow.options.reward_weights`. Attribution (masopd's PAC): each
answer checked against y*.

Registered as `workflow.name=solver_verifier` (math), it trains with the existing estimators of
multi-agent workflows, e.g.

    python -m verl_masopd.train imports=[examples/solver_verifier.py] preset=cpu \
        workflow.name=solver_verifier workflow.domain=math algorithm.adv_estimator=opd \
        teacher.model_path=TEACHER students.path=STUDENT data.train_files=[math.parquet]

(or `python examples/solver_verifier.py OVERRIDES`); the run saves `imports`, so
`python -m verl_masopd.eval --checkpoint RUN/checkpoints ...` plays this workflow again.

(any override of `python -m verl_masopd.train`; every estimator that serves multi-agent workflows
accepts it: masopd, opd, grpo, magrpo, marft, at_grpo).
"""

from verl_masopd.verify import math_equal
from verl_masopd.workflows import register_workflow
from verl_masopd.workflows.base import Action, Agent, Episode, Turn
from verl_masopd.workflows.math import (
    MathDomainWorkflow,
    ReasonerEvidence,
    math_submission,
    parse_answer,
    reasoner_evidence,
)
from verl_masopd.workflows.parsing import shown

SOLVER, VERIFIER = "solver", "verifier"
AGREE = "agree"

INSTRUCTIONS = {
    SOLVER: "You are the Solver. Solve the math problem step by step. After a turn you see the Verifier's "
    "reply; revise your answer if it is wrong. End with the final answer as `#### <answer>`.",
    VERIFIER: "You are the Verifier. Check the Solver's latest answer. If it is right, end your reply with "
    "the line `agree`; otherwise end with the correct answer as `#### <answer>`.",
}
COMPACT_INSTRUCTIONS = {SOLVER: "Solver. Answer as #### n.", VERIFIER: "Verifier. Say agree, or answer as #### n."}


class SolverVerifierWorkflow(MathDomainWorkflow):
    name = "solver_verifier"
    roles = (SOLVER, VERIFIER)
    instructions = INSTRUCTIONS
    role_evidence = {SOLVER: ReasonerEvidence, VERIFIER: ReasonerEvidence}
    compact_instructions = COMPACT_INSTRUCTIONS

    def parse(self, agent: Agent, text: str) -> Action:
        """The Solver's `#### n`; the Verifier's `agree` (its last non-empty line) or `#### n`."""
        last_line = text.strip().splitlines()[-1:] if isinstance(text, str) else []
        if agent.role == VERIFIER and [line.strip().lower() for line in last_line] == [AGREE]:
            return Action(agent, text, {"agree": "yes"})
        return parse_answer(agent, text)

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        self.check_actions(episode, actions)
        problem, previous = episode.problem, episode.turns[-1] if episode.turns else None
        agents = {a.name: reasoner_evidence(actions[a.name], problem) for a in self.agents_of(SOLVER)}
        for verifier in self.agents_of(VERIFIER):
            action = actions[verifier.name]
            if "agree" in action.fields:
                # `agree` adopts the Solvers' answer the Verifier was shown (none at turn 0)
                seen = previous.verifier["agents"] if previous else {}
                answers = [seen[s.name].answer for s in self.agents_of(SOLVER) if s.name in seen]
                adopted = next((a for a in answers if a is not None), None)
                error = None if adopted is not None else "agree with no Solver answer to agree with"
                action = Action(verifier, action.text, {"answer": adopted} if adopted else {}, error)
            agents[verifier.name] = reasoner_evidence(action, problem)
        agreed = all(
            _equivalent(agents[v.name].answer, agents[s.name].answer)
            for v in self.agents_of(VERIFIER)
            for s in self.agents_of(SOLVER)
        )
        # what both see next turn: every answer (clipped), then whether they agree
        report = ", ".join(f"{name} {shown(ev.answer or 'none', 40)}" for name, ev in agents.items())
        report += ", agree" if agreed else ", disagree"
        return self.record(episode, actions, report, agreed, {"agents": agents})

    def submit(self, episode: Episode) -> tuple[str | None, float]:
        """The Verifiers' final answer (majority, as math.py) and 1[ŷ ≡ y*]."""
        return math_submission(episode.turns[-1], self.agents_of(VERIFIER))


def _equivalent(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and math_equal(a, b)


register_workflow(SolverVerifierWorkflow.name, SolverVerifierWorkflow.domain, SolverVerifierWorkflow)


if __name__ == "__main__":
    from verl_masopd.train import main

    main()
