"""The workflow interface: what a multi-agent system implements to be played, judged and distilled.

A workflow is one file with one `Workflow` subclass (tinker-cookbook's render / parse / step /
judge split). The rollout manager drives it turn by turn; `teacher/` re-renders recorded turns
under other role conditions; estimators read the `Judgement`. Nothing here imports torch.

Episode timeline (docs/design.md, "Episodes"): at turn t the workflow's `schedule(episode)`
names the agents that act; each sees `render(episode, agent, t)`, built from `episode.turns[:t]`
only, and they act in parallel on the same state; `step` executes, records the turn and sets
`episode.done` (on agreement, at the horizon, or when the workflow's protocol ends). The default
schedule is every agent at every turn, which is what the two-role systems of the papers play. A
hierarchical workflow schedules one role after another and creates agents during an episode: its
`step` calls `spawn` (a wave of k Searchers, k chosen by the Leader's output) and the next turn's
schedule names them. `schedule` reads the episode and changes nothing (it may be called more than
once per turn). An agent with a `tool` calls it inside its reply (workflows/tools.py).

Information flow rule: `Turn.report` and `Turn.actions` are what agents may see. `Turn.verifier`
holds verifier-only evidence (golden-test results, reference checks, answer checks) and must
never be rendered into any agent's prompt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.tools import Tool

HOLD, REVISE = "hold", "revise"


@dataclass(frozen=True)
class Agent:
    """One seat of the system: `name` is unique (e.g. "coder_1"), `index` counts within the role."""

    name: str
    role: str
    index: int


@dataclass
class Action:
    """One agent's output at one turn: the raw text and what the workflow parsed from it.

    `fields` holds the parsed pieces (e.g. "code", "test_input", "test_output", "answer");
    `error` says why parsing failed (empty output, no code block, ...), or is None.
    """

    agent: Agent
    text: str
    fields: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Turn:
    """What happened at one turn.

    `report`: the execution report every agent sees next turn ("" when there is none).
    `agreed`: the environment found the two roles' outputs in agreement.
    `verifier`: verifier-only evidence, never shown to an agent (the project's workflows keep each
    agent's `Evidence`, evidence.py, in `verifier["agents"][name]`).
    """

    index: int
    actions: dict[str, Action]
    report: str
    agreed: bool
    verifier: dict = field(default_factory=dict)


@dataclass
class Episode:
    """A played episode: `agents` are the seats in play so far (`Workflow.spawn` adds to them)."""

    problem: Problem
    agents: tuple[Agent, ...]
    turns: list[Turn] = field(default_factory=list)
    done: bool = False

    def agent(self, name: str) -> Agent:
        return next(a for a in self.agents if a.name == name)


@dataclass(frozen=True)
class Reward:
    """A role-local reward of D.4 at one turn: `value` = Σ w·term over the terms in `terms`.

    `mask` is False when the evidence the reward needs was unavailable (the value is then 0).
    """

    value: float
    mask: bool
    terms: dict[str, float] = field(default_factory=dict)


@dataclass
class Judgement:
    """The verdict on a finished episode.

    `correct`: the submission solves the problem (code: passes every golden test; math: ≡ y*).
    `team`: the team signal of D.4, broadcast to every turn (code: golden pass fraction of the
    submission; math: 1[ŷ ≡ y*]). `local[(t, agent_name)]`: the role-local reward of that action.
    """

    correct: bool
    team: float
    submission: str | None
    local: dict[tuple[int, str], Reward] = field(default_factory=dict)


@dataclass(frozen=True)
class QaScores:
    """An episode as one attempt at a QA question: its submitted answer scored by exact match,
    sub-exact match and relaxed exact match against the golden answers (verify/qa_match.py), and
    `failure`, why it has no tagged answer (None when it has one)."""

    em: bool
    sub_em: bool
    relaxed_em: bool
    failure: str | None


@dataclass
class Attribution:
    """a^t of PAC (docs/method.md, "PAC") for a turn that ended in conflict.

    `verdicts[agent_name]`: whether that agent's output is correct, None when the check could not
    run (e.g. no reference solution). `decisions[agent_name]`: HOLD for a correct output, REVISE
    otherwise. `source`: "rules" or "model".
    """

    turn: int
    verdicts: dict[str, bool | None]
    decisions: dict[str, str]
    source: str = "rules"

    @property
    def complete(self) -> bool:
        return all(v is not None for v in self.verdicts.values())


class Workflow(ABC):
    """One multi-agent (or single-agent) system. Subclasses set `name`, `domain` and `roles`.

    `agents` holds every seat the workflow can use (their policies are built at start-up);
    `starting_agents()` the seats an episode begins with (default: all of them). `agrees`: its
    `step` compares the agents' outputs (`Turn.agreed`); False for a team whose roles do not
    answer the same thing, whose evaluation then has no agreement metrics. `judged_roles`: the
    roles whose replies `critique` puts to a judge answering with one of `judge_verdicts`
    (approval first; teacher/judging.py). `qa_attempts`: its evaluation also reports every episode
    as an attempt at a QA question, scored by `qa_scores` (eval/qa_episodes.py)."""

    name: ClassVar[str]
    domain: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    agrees: ClassVar[bool] = True
    judged_roles: ClassVar[tuple[str, ...]] = ()
    judge_verdicts: ClassVar[tuple[str, str]] = ("yes", "no")
    qa_attempts: ClassVar[bool] = False

    def __init__(self, agents_per_role: int = 1, horizon: int = 4):
        if agents_per_role < 1:
            raise ValueError(f"workflow.agents_per_role must be >= 1, got {agents_per_role}")
        if horizon < 1:
            raise ValueError(f"workflow.horizon must be >= 1, got {horizon}")
        self.agents_per_role = agents_per_role
        self.horizon = horizon
        self.agents = tuple(Agent(f"{r}_{i}", r, i) for r in self.roles for i in range(agents_per_role))

    def reset(self, problem: Problem) -> Episode:
        if problem.domain != self.domain:
            raise ValueError(
                f"workflow {self.name!r} serves {self.domain} problems, got {problem.domain} ({problem.uid})"
            )
        return Episode(problem=problem, agents=self.starting_agents())

    def starting_agents(self) -> tuple[Agent, ...]:
        return self.agents

    def schedule(self, episode: Episode) -> tuple[Agent, ...]:
        """The agents that act at turn len(episode.turns), each once, in parallel; reads the episode
        only. Default: every agent in play."""
        return episode.agents

    def spawn(self, episode: Episode, role: str) -> Agent:
        """Bring the next unused seat of `role` into play in `episode` and return it (from `step`)."""
        playing = {a.name for a in episode.agents}
        seat = next((a for a in self.agents if a.role == role and a.name not in playing), None)
        if seat is None:
            seats = sum(a.role == role for a in self.agents)
            raise ValueError(f"workflow {self.name!r} has {seats} seat(s) of role {role!r}, all in play")
        episode.agents = (*episode.agents, seat)
        return seat

    def tool(self, agent: Agent) -> Tool | None:
        """The tool `agent` may call inside its reply (workflows/tools.py); None: no tool."""
        return None

    def critique(self, episode: Episode, agent: Agent, turn: int) -> list[dict] | None:
        """Chat messages that put `agent`'s reply at `turn` to a judge who answers with one of
        `judge_verdicts`; None for a role not in `judged_roles`. Default: None."""
        return None

    def qa_scores(self, episode: Episode) -> QaScores:
        """`episode` as an attempt at its QA question, for a workflow with `qa_attempts`."""
        raise NotImplementedError(f"workflow {self.name!r} does not score QA attempts (qa_attempts is False)")

    @abstractmethod
    def render(self, episode: Episode, agent: Agent, turn: int, role: str | None = None) -> list[dict]:
        """Chat messages `agent` sees at `turn`, built from `episode.turns[:turn]` only.

        `role` renders the same observation under another role's condition (its instruction
        replaces the agent's own); the teacher uses it for RAS. Default: the agent's role.
        """

    @abstractmethod
    def parse(self, agent: Agent, text: str) -> Action:
        """Parse untrusted model output; never raises, records the reason in `Action.error`."""

    @abstractmethod
    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        """Execute and compare one turn's actions, append the `Turn`, set `episode.done`."""

    @abstractmethod
    def judge(self, episode: Episode) -> Judgement:
        """The submission, the team signal and every role-local reward (D.4)."""

    @abstractmethod
    def attribute(self, episode: Episode, turn: int) -> Attribution | None:
        """Rules attribution of turn `turn`'s conflict; None when that turn did not end in one."""
