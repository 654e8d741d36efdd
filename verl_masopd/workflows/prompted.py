"""What the project's workflows share: chat rendering from structured state, turn bookkeeping,
D.4 judging from recorded evidence, and rules attribution from recorded verdicts.

A subclass sets `instructions` (one system message per role) and `role_evidence` (the `Evidence`
type each role's agents produce, evidence.py), parses outputs, and in `step` stores each agent's
evidence in `Turn.verifier["agents"][name]`: its reward terms and its `verdict`. The weights of
those terms are overridden per role with `workflow.reward_weights` ({role: {term: weight}}).

Prompt of agent a at turn t (Qwen3 chat messages, rebuilt every turn):
  system: the instruction of a's role (or of `role` when rendering for a teacher's role condition)
  user:   the problem; then, for t > 0, a's own output at t−1, the other role's outputs at t−1 and
          the execution report of turn t−1 (sections without content are left out).

Prompt styles (`prompt_style`, config key `workflow.prompt_style`): "paper" renders the paper's
instructions and markdown sections; "compact" renders the same sections with terse role
instructions (`compact_instructions`) and one-word labels, so that a turn's whole context of a
small problem stays within about 200 tokens (the tiny world's models). Roles, history, parsing,
agreement, verifier and rewards are the same in both.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from verl_masopd.workflows.base import HOLD, REVISE, Action, Agent, Attribution, Episode, Judgement, Turn, Workflow
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.parsing import PYTHON_TAGS, last_block, shown
from verl_masopd.workflows.problem import Problem

PAPER, COMPACT = "paper", "compact"
PROMPT_STYLES = (PAPER, COMPACT)


class PromptedWorkflow(Workflow):
    instructions: ClassVar[dict[str, str]]
    role_evidence: ClassVar[dict[str, type[Evidence]]]
    compact_instructions: ClassVar[dict[str, str]] = {}
    default_timeout: ClassVar[float]

    def __init__(
        self,
        agents_per_role: int = 1,
        horizon: int = 4,
        *,
        timeout: float | None = None,
        reward_weights: dict | None = None,
        shown_chars: int = 4000,
        prompt_style: str = PAPER,
    ):
        super().__init__(agents_per_role, horizon)
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"workflow.prompt_style must be one of {list(PROMPT_STYLES)}, got {prompt_style!r}")
        if prompt_style == COMPACT and not self.compact_instructions:
            raise ValueError(f"workflow.prompt_style: workflow {self.name!r} ({self.domain}) has no compact prompts")
        self.prompt_style = prompt_style
        self.timeout = float(timeout if timeout is not None else self.default_timeout)
        if self.timeout <= 0:
            raise ValueError(f"workflow.timeout must be > 0 seconds, got {timeout}")
        if shown_chars < 1:
            raise ValueError(f"workflow.shown_chars must be >= 1, got {shown_chars}")
        self.weights = self._term_weights(reward_weights or {})
        self.shown_chars = shown_chars

    def _term_weights(self, overrides: dict) -> dict[str, dict[str, float]]:
        """Each role's term weights: its evidence type's `WEIGHTS` with `overrides` ({role: {term:
        weight}}) applied; a role this workflow does not have fails, named."""
        for role in overrides:
            if role not in self.role_evidence:
                raise ValueError(
                    f"workflow.reward_weights: unknown role {role!r} (known: {sorted(self.role_evidence)})"
                )
        return {role: kind.resolve_weights(role, overrides.get(role)) for role, kind in self.role_evidence.items()}

    def agents_of(self, role: str) -> list[Agent]:
        return [a for a in self.agents if a.role == role]

    def problem_text(self, problem: Problem) -> str:
        return problem.statement

    def render(self, episode: Episode, agent: Agent, turn: int, role: str | None = None) -> list[dict]:
        role = role or agent.role
        instructions = self.compact_instructions if self.prompt_style == COMPACT else self.instructions
        if role not in instructions:
            raise ValueError(f"workflow {self.name!r} ({self.domain}) has no role {role!r}; roles: {self.roles}")
        if not 0 <= turn <= len(episode.turns):
            raise ValueError(f"cannot render turn {turn} of an episode with {len(episode.turns)} turns")
        compact = self.prompt_style == COMPACT
        sections = [("Q" if compact else "Problem", self.problem_text(episode.problem))]
        if turn > 0:
            previous = episode.turns[turn - 1]
            sections.append(("You" if compact else "Your previous output", self._shown(previous.actions[agent.name])))
            for other in self.agents:
                if other.role != agent.role:
                    title = other.name if compact else f"Latest output of {other.name}"
                    sections.append((title, self._shown(previous.actions[other.name])))
            sections.append(("Report" if compact else "Execution report", previous.report))
        if compact:
            user = "\n".join(f"{title}: {body}" for title, body in sections if body)
        else:
            user = "\n\n".join(f"## {title}\n{body}" for title, body in sections if body)
        return [{"role": "system", "content": instructions[role]}, {"role": "user", "content": user}]

    def judge(self, episode: Episode) -> Judgement:
        if not episode.turns:
            raise ValueError(f"episode of problem {episode.problem.uid} has no turns to judge")
        local = {
            (turn.index, a.name): turn.verifier["agents"][a.name].reward(self.weights[a.role])
            for turn in episode.turns
            for a in self.agents
        }
        submission, team = self.submit(episode)
        return Judgement(correct=team == 1.0, team=team, submission=submission, local=local)

    @abstractmethod
    def submit(self, episode: Episode) -> tuple[str | None, float]:
        """The submission of a finished episode and its team signal (D.4)."""

    def attribute(self, episode: Episode, turn: int) -> Attribution | None:
        record = episode.turns[turn]
        if record.agreed:
            return None
        verdicts = {a.name: record.verifier["agents"][a.name].verdict for a in self.agents}
        decisions = {name: HOLD if ok else REVISE for name, ok in verdicts.items() if ok is not None}
        return Attribution(turn=turn, verdicts=verdicts, decisions=decisions)

    def check_actions(self, episode: Episode, actions: dict[str, Action]) -> None:
        if episode.done:
            raise ValueError(f"episode of problem {episode.problem.uid} is already done")
        expected = {a.name for a in self.schedule(episode)}
        if set(actions) != expected:
            raise ValueError(
                f"step needs one action per agent: missing {sorted(expected - set(actions))}, "
                f"unexpected {sorted(set(actions) - expected)}"
            )

    def record(self, episode: Episode, actions: dict[str, Action], report: str, agreed: bool, verifier: dict) -> Turn:
        turn = Turn(index=len(episode.turns), actions=dict(actions), report=report, agreed=agreed, verifier=verifier)
        episode.turns.append(turn)
        episode.done = agreed or len(episode.turns) >= self.horizon
        return turn

    def _shown(self, action: Action) -> str:
        text = shown(action.text, self.shown_chars) if isinstance(action.text, str) else ""
        return f"{text}\n[unusable: {action.error}]" if action.error else text


def parse_program(agent: Agent, text: str) -> Action:
    """The last ```python block of `text` as field "code"."""
    code, error = last_block(text, PYTHON_TAGS)
    return Action(agent, text, {"code": code} if code is not None else {}, error)
