"""The hierarchical search team of MultiAgent-OPD: a Leader, waves of Searchers, an Answerer
(docs/method.md, "The hierarchical search system").

An episode, one role per turn (the schedule reads `Turn.verifier["next"]`, the seats the turn's
`step` put in play):

    Leader → wave of k Searchers → Leader → … → Leader hands over → G_a Answerers

- Leader: sees the question, the reports collected so far (numbered) and the waves sent. It
  either sends a wave, 1..K subtasks as `<subtask>…</subtask>` (K = `max_searchers_per_wave`; more
  are dropped and counted), or hands chosen reports to the Answerer as `<select>1, 3</select>`
  (numbers out of range are dropped and counted; an empty selection hands over none). Whichever
  tag comes last decides. After `max_waves` waves it must hand over. An output with neither tag,
  or a wave asked for after the last one, ends the episode without a candidate ("no_candidate").
- Searcher: sees only its subtask. It searches with `<search>query</search>` (search_tool.py: at
  most `max_calls` calls, top-`topk` passages inside `<information>…</information>`, cut to
  `max_obs_tokens`) and ends with its report as `<summary>…</summary>`, read outside the
  `<information>` blocks. Without one its report reads "[no summary]" ("no_summary").
- Cascaded (`system: cascaded`, C-MAS, the system the teacher is trained in): no Leader; one
  Searcher gets the question as its subtask and its report goes to the Answerers. 2 turns.
- Judge (the Prompted Critic comparator, teacher/judging.py): `critique` puts a Searcher's subtask
  and its whole reply, passages included, to the teacher prompted as a judge, who answers yes or no.
- Answerer: `answer_candidates` seats sample candidates from the same hand-over: the question and
  the selected reports, renumbered; each answers in `<answer>…</answer>` (the last span). The team
  submits candidate 0.

Correctness (verify/qa_match.py) against any golden answer: EM after SQuAD normalisation; also
sub-EM and relaxed EM, where relaxed EM reads an untagged reply's last line. Rewards (D.4 split):
the team signal is the submitted candidate's EM; each Answerer's role-local reward is its own
candidate's EM; the Leader and the Searchers have no role-local reward (the Leader learns from the
team signal, the Searchers from the teacher). With `algorithm.per_role` the Answerer's GRPO group
is its episode's candidates (`group_by: episode`), so the team signal, equal across the group,
cancels there. Reports and passages are context or observation tokens: never trained on.

Settings (`workflow.options`): max_waves W (3), max_searchers_per_wave K (4), max_calls S (3),
topk (3), max_obs_tokens (500), answer_candidates G_a (4), retriever (a server URL, an index
folder or another registered backend's spec, retrieval/backends.py), search_timeout_s (30), tags
(the tag names, keys of `TAGS`), shown_chars (a report's length as shown, 2000), system
("hierarchical" or "cascaded"). The hierarchical episode has at most 2W + 2 turns, the cascaded one 2, which `workflow.horizon` must
state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from verl_masopd.retrieval.backends import open_retriever
from verl_masopd.verify.qa_match import exact_match, relaxed_match, sub_exact_match
from verl_masopd.workflows.base import Action, Agent, Attribution, Episode, Judgement, QaScores, Turn, Workflow
from verl_masopd.workflows.evidence import Evidence
from verl_masopd.workflows.parsing import shown, unusable_reason
from verl_masopd.workflows.problem import QA
from verl_masopd.workflows.prompted import COMPACT, PAPER, PROMPT_STYLES
from verl_masopd.workflows.search_tool import SearchTool

LEADER, SEARCHER, ANSWERER = "leader", "searcher", "answerer"
TAGS = {
    "subtask": "subtask",
    "select": "select",
    "search": "search",
    "information": "information",
    "summary": "summary",
    "answer": "answer",
}
HIERARCHICAL, CASCADED = "hierarchical", "cascaded"
SYSTEMS = (HIERARCHICAL, CASCADED)
WAVE, HANDOVER, NO_CANDIDATE = "wave", "handover", "no_candidate"
NO_SUMMARY, UNTAGGED, EMPTY_CANDIDATE = "no_summary", "untagged", "empty_candidate"

PAPER_INSTRUCTIONS = {
    LEADER: """You are the Leader of a team that answers a question with a Wikipedia search engine. Searchers search for you and report back; an Answerer answers from the reports you choose.
Each time you act, either send a wave of 1 to {K} Searchers, one subtask each, every subtask as <{subtask}>...</{subtask}>; or, when the reports are enough, hand the useful ones to the Answerer as <{select}>report numbers, separated by commas</{select}>.
You can send at most {W} waves; after the last one you must hand over.""",
    SEARCHER: """You are a Searcher in a team that answers a question with a Wikipedia search engine. Find what your subtask asks for.
Reason step by step. To search, write a query as <{search}>query</{search}>; the top results come back between <{information}> and </{information}>. You can search at most {S} times.
When you have found it, end your reply with a short report of what you found as <{summary}>...</{summary}>.""",
    ANSWERER: """You are the Answerer in a team that answers a question with a Wikipedia search engine. Answer the question from the Searchers' reports.
Reason step by step, then give the final answer, a few words only, as <{answer}>...</{answer}>.""",
}
JUDGE_INSTRUCTIONS = {
    PAPER: """You judge the work of a Searcher in a team that answers questions with a Wikipedia search engine. The Searcher was given a subtask, searched, and ended its reply with a report between <{summary}> and </{summary}>; the results it got are between <{information}> and </{information}>.
Is the report a correct answer to the subtask, supported by the results? Reply with one word: yes or no.""",
    COMPACT: "Judge. Is the report right? yes or no.",
}
COMPACT_INSTRUCTIONS = {
    LEADER: "Leader. Send <{subtask}>q</{subtask}> (1-{K}) or hand over <{select}>n</{select}>.",
    SEARCHER: "Searcher. <{search}>q</{search}> to search, end with <{summary}>s</{summary}>.",
    ANSWERER: "Answerer. Answer as <{answer}>a</{answer}>.",
}


@dataclass(frozen=True)
class LeaderEvidence(Evidence):
    """A Leader's decision: "wave" (with `subtasks`, `dropped` past K), "handover" (with the
    `selected` report numbers, `invalid` dropped) or "no_candidate". No role-local reward."""

    WEIGHTS = {}

    decision: str
    subtasks: tuple[str, ...] = ()
    dropped: int = 0
    selected: tuple[int, ...] = ()
    invalid: int = 0

    def terms(self) -> None:
        return None


@dataclass(frozen=True)
class SearcherEvidence(Evidence):
    """A Searcher's `subtask`, its report (`summary`, None without one), its searches and its
    failure. No role-local reward: the Searchers learn from the teacher."""

    WEIGHTS = {}

    subtask: str
    summary: str | None
    searches: int
    failure: str | None

    def terms(self) -> None:
        return None


@dataclass(frozen=True)
class AnswerEvidence(Evidence):
    """An Answerer's candidate checked against the golden answers. Reward 1·em.

    `failure`: "untagged" (no answer tag), "empty_candidate" (an empty one) or None."""

    WEIGHTS = {"em": 1.0}

    answer: str | None
    em: bool
    sub_em: bool
    relaxed_em: bool
    failure: str | None

    def terms(self) -> dict[str, float]:
        return {"em": float(self.em)}


class SearchWorkflow(Workflow):
    """Leader, Searchers and Answerer (module doc)."""

    name = "search"
    domain = QA
    roles = (LEADER, SEARCHER, ANSWERER)
    agrees = False
    judged_roles = (SEARCHER,)
    qa_attempts = True

    def __init__(
        self,
        agents_per_role: int = 1,
        horizon: int = 8,
        *,
        retriever: str = "",
        max_waves: int = 3,
        max_searchers_per_wave: int = 4,
        max_calls: int = 3,
        topk: int = 3,
        max_obs_tokens: int = 500,
        answer_candidates: int = 4,
        search_timeout_s: float = 30.0,
        tags: dict | None = None,
        shown_chars: int = 2000,
        system: str = HIERARCHICAL,
        prompt_style: str = PAPER,
    ):
        if agents_per_role != 1:
            raise ValueError(
                "workflow.agents_per_role: the search workflow's seats come from "
                f"workflow.options.max_searchers_per_wave and answer_candidates; set it to 1, got {agents_per_role}"
            )
        for key, value in (
            ("max_waves", max_waves),
            ("max_searchers_per_wave", max_searchers_per_wave),
            ("answer_candidates", answer_candidates),
            ("shown_chars", shown_chars),
        ):
            if value < 1:
                raise ValueError(f"workflow.options.{key}: must be >= 1, got {value}")
        if system not in SYSTEMS:
            raise ValueError(f"workflow.options.system: must be one of {list(SYSTEMS)}, got {system!r}")
        turns = 2 * max_waves + 2 if system == HIERARCHICAL else 2
        if horizon != turns:
            rule = f"2·max_waves + 2 = {turns} turns (workflow.options.max_waves={max_waves})"
            raise ValueError(
                f"workflow.horizon: the {system} search workflow plays at most "
                f"{rule if system == HIERARCHICAL else '2 turns'}; set workflow.horizon={turns}, got {horizon}"
            )
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"workflow.prompt_style must be one of {list(PROMPT_STYLES)}, got {prompt_style!r}")
        unknown = sorted(set(tags or {}) - set(TAGS))
        if unknown:
            raise ValueError(f"workflow.options.tags.{unknown[0]}: unknown tag (known: {sorted(TAGS)})")
        super().__init__(1, horizon)
        self.tags = {**TAGS, **{k: str(v) for k, v in (tags or {}).items()}}
        self.max_waves, self.max_searchers, self.candidates = max_waves, max_searchers_per_wave, answer_candidates
        self.prompt_style, self.shown_chars, self.system = prompt_style, shown_chars, system
        searchers = max_waves * max_searchers_per_wave if system == HIERARCHICAL else 1
        self.agents = (
            *((Agent(f"{LEADER}_0", LEADER, 0),) if system == HIERARCHICAL else ()),
            *(Agent(f"{SEARCHER}_{i}", SEARCHER, i) for i in range(searchers)),
            *(Agent(f"{ANSWERER}_{i}", ANSWERER, i) for i in range(answer_candidates)),
        )
        try:
            opened = open_retriever(retriever, search_timeout_s)
        except ValueError as error:
            raise ValueError(f"workflow.options.retriever: {error}") from None
        self.search_tool = SearchTool(
            opened,
            topk,
            self.tags["search"],
            self.tags["information"],
            max_calls,
            max_obs_tokens,
            timeout_s=search_timeout_s * 3,
        )
        texts = COMPACT_INSTRUCTIONS if prompt_style == COMPACT else PAPER_INSTRUCTIONS
        self.instructions = {
            role: text.format(K=max_searchers_per_wave, W=max_waves, S=max_calls, **self.tags)
            for role, text in texts.items()
        }
        self.judge_instructions = JUDGE_INSTRUCTIONS[prompt_style].format(**self.tags)

    def starting_agents(self) -> tuple[Agent, ...]:
        """The Leader; in the cascaded system the one Searcher, whose subtask is the question."""
        return self.agents[:1]

    def schedule(self, episode: Episode) -> tuple[Agent, ...]:
        if not episode.turns:
            return self.starting_agents()
        return tuple(episode.agent(name) for name in episode.turns[-1].verifier["next"])

    def tool(self, agent: Agent) -> SearchTool | None:
        return self.search_tool if agent.role == SEARCHER else None

    # ---- rendering -------------------------------------------------------------------------

    def render(self, episode: Episode, agent: Agent, turn: int, role: str | None = None) -> list[dict]:
        role = role or agent.role
        if role not in self.instructions:
            raise ValueError(f"workflow {self.name!r} has no role {role!r}; roles: {self.roles}")
        if not 0 <= turn <= len(episode.turns):
            raise ValueError(f"cannot render turn {turn} of an episode with {len(episode.turns)} turns")
        turns = episode.turns[:turn]
        compact = self.prompt_style == COMPACT
        if agent.role == SEARCHER:
            sections = [("Task" if compact else "Subtask", self._subtask(episode, agent, turns))]
        elif agent.role == LEADER:
            sent = waves(turns)
            sections = [
                ("Q" if compact else "Question", episode.problem.statement),
                ("Reports", self._reports(reports(turns))),
                ("Waves", f"{sent}/{self.max_waves}" if compact else f"{sent} of {self.max_waves} sent"),
            ]
        else:
            collected = reports(turns)
            chosen = [collected[n - 1] for n in turns[-1].verifier["handover"]]
            sections = [("Q" if compact else "Question", episode.problem.statement), ("Reports", self._reports(chosen))]
        if compact:
            user = "\n".join(f"{title}: {body}" for title, body in sections if body)
        else:
            user = "\n\n".join(f"## {title}\n{body}" for title, body in sections if body)
        return [{"role": "system", "content": self.instructions[role]}, {"role": "user", "content": user}]

    @staticmethod
    def _subtask(episode: Episode, agent: Agent, turns: list[Turn]) -> str:
        """A Searcher's subtask: the Leader's, or the question in the cascaded system."""
        return turns[-1].verifier["subtasks"][agent.name] if turns else episode.problem.statement

    def critique(self, episode: Episode, agent: Agent, turn: int) -> list[dict] | None:
        """A Searcher's reply at `turn` put to a judge (the Prompted Critic): its subtask and its
        whole reply, retrieved passages included."""
        if agent.role != SEARCHER:
            return None
        subtask = self._subtask(episode, agent, episode.turns[:turn])
        return self.judge_messages(subtask, episode.turns[turn].actions[agent.name].text)

    def judge_messages(self, subtask: str, reply: str) -> list[dict]:
        """The judge's chat messages for a Searcher's `reply` to `subtask`."""
        if self.prompt_style == COMPACT:
            user = f"Task: {subtask}\nReply: {reply}"
        else:
            user = f"## Subtask\n{subtask}\n\n## The Searcher's reply\n{reply}"
        return [{"role": "system", "content": self.judge_instructions}, {"role": "user", "content": user}]

    def _reports(self, items: list[tuple[str, str | None]]) -> str:
        sep = "\n" if self.prompt_style == PAPER else " | "
        return sep.join(
            f"{n} ({subtask}) {shown(summary, self.shown_chars) if summary else '[no summary]'}"
            for n, (subtask, summary) in enumerate(items, 1)
        )

    # ---- parsing ---------------------------------------------------------------------------

    def parse(self, agent: Agent, text: str) -> Action:
        reason = unusable_reason(text)
        if reason:
            return Action(agent, text if isinstance(text, str) else "", {}, reason)
        if agent.role == LEADER:
            return self._parse_leader(agent, text)
        if agent.role == SEARCHER:
            summary = last_span(without_spans(text, self.tags["information"]), self.tags["summary"])
            if not summary:
                return Action(agent, text, {}, f"no <{self.tags['summary']}> report")
            return Action(agent, text, {"summary": summary})
        answer = last_span(text, self.tags["answer"])
        if answer is None:
            return Action(agent, text, {}, f"no <{self.tags['answer']}> tag")
        return Action(agent, text, {"answer": answer}, None if answer else f"empty <{self.tags['answer']}>")

    def _parse_leader(self, agent: Agent, text: str) -> Action:
        sub, sel = self.tags["subtask"], self.tags["select"]
        subtasks = [s for s in spans(text, sub) if s]
        selection = last_span(text, sel)
        if selection is not None and (not subtasks or text.rfind(f"<{sel}>") > text.rfind(f"<{sub}>")):
            return Action(agent, text, {"select": selection})
        if subtasks:
            return Action(agent, text, {"subtasks": json.dumps(subtasks)})
        return Action(agent, text, {}, f"neither <{sub}> nor <{sel}>")

    # ---- the environment -------------------------------------------------------------------

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        if episode.done:
            raise ValueError(f"episode of problem {episode.problem.uid} is already done")
        scheduled = self.schedule(episode)
        if set(actions) != {a.name for a in scheduled}:
            raise ValueError(f"step needs one action per scheduled agent {sorted(a.name for a in scheduled)}")
        role = scheduled[0].role
        if role == LEADER:
            leader = scheduled[0]
            evidence = self._lead(episode, actions[leader.name])
            subtasks, following, handover = {}, (), ()
            if evidence.decision == WAVE:
                seats = [self.spawn(episode, SEARCHER) for _ in evidence.subtasks]
                subtasks = {seat.name: s for seat, s in zip(seats, evidence.subtasks, strict=True)}
                following = tuple(subtasks)
            elif evidence.decision == HANDOVER:
                following, handover = self._hand_over(episode), evidence.selected
            verifier = {
                "agents": {leader.name: evidence},
                "subtasks": subtasks,
                "next": following,
                "handover": handover,
            }
        elif role == SEARCHER:
            verifier = {"agents": {n: self._searched(episode, a) for n, a in actions.items()}}
            if self.system == CASCADED:
                verifier |= {"next": self._hand_over(episode), "handover": (1,)}
            else:
                verifier["next"] = (f"{LEADER}_0",)
        else:
            golds = episode.problem.answers
            verifier = {"agents": {n: answer_evidence(a, golds) for n, a in actions.items()}, "next": ()}
        turn = Turn(len(episode.turns), dict(actions), "", agreed=False, verifier=verifier)
        episode.turns.append(turn)
        episode.done = not verifier["next"]
        return turn

    def _hand_over(self, episode: Episode) -> tuple[str, ...]:
        """Bring the Answerers into play; their names."""
        return tuple(self.spawn(episode, ANSWERER).name for _ in range(self.candidates))

    def _lead(self, episode: Episode, action: Action) -> LeaderEvidence:
        sent = waves(episode.turns)
        if "select" in action.fields:
            numbers = [int(n) for n in re.findall(r"\d+", action.fields["select"])]
            available = len(reports(episode.turns))
            chosen = tuple(dict.fromkeys(n for n in numbers if 1 <= n <= available))
            return LeaderEvidence(None, HANDOVER, selected=chosen, invalid=len(numbers) - len(chosen))
        if "subtasks" in action.fields and sent < self.max_waves:
            subtasks = json.loads(action.fields["subtasks"])
            kept = tuple(subtasks[: self.max_searchers])
            return LeaderEvidence(None, WAVE, subtasks=kept, dropped=len(subtasks) - len(kept))
        return LeaderEvidence(None, NO_CANDIDATE)

    def _searched(self, episode: Episode, action: Action) -> SearcherEvidence:
        subtask = self._subtask(episode, action.agent, episode.turns)
        visible = without_spans(action.text, self.tags["information"])
        searches = visible.count(f"</{self.tags['search']}>")
        summary = action.fields.get("summary")
        return SearcherEvidence(None, subtask, summary, searches, None if summary else NO_SUMMARY)

    def judge(self, episode: Episode) -> Judgement:
        if not episode.turns:
            raise ValueError(f"episode of problem {episode.problem.uid} has no turns to judge")
        local = {
            (turn.index, name): evidence.reward(evidence.WEIGHTS)
            for turn in episode.turns
            for name, evidence in turn.verifier["agents"].items()
        }
        candidate = submitted(episode)
        team = float(candidate is not None and candidate.em)
        return Judgement(
            correct=team == 1.0, team=team, submission=candidate.answer if candidate else None, local=local
        )

    def attribute(self, episode: Episode, turn: int) -> Attribution | None:
        """No conflict attribution: the roles do not answer the same thing."""
        return None

    def qa_scores(self, episode: Episode) -> QaScores:
        """The submitted candidate's scores; failure "no_candidate" and every score false when no
        Answerer acted."""
        candidate = submitted(episode)
        if candidate is None:
            return QaScores(False, False, False, NO_CANDIDATE)
        return QaScores(candidate.em, candidate.sub_em, candidate.relaxed_em, candidate.failure)


def waves(turns: list[Turn]) -> int:
    """How many waves of Searchers `turns` hold."""
    return sum(any(isinstance(e, SearcherEvidence) for e in t.verifier["agents"].values()) for t in turns)


def reports(turns: list[Turn]) -> list[tuple[str, str | None]]:
    """(subtask, summary) of every Searcher of `turns`, in wave and seat order."""
    return [
        (e.subtask, e.summary) for t in turns for e in t.verifier["agents"].values() if isinstance(e, SearcherEvidence)
    ]


def submitted(episode: Episode) -> AnswerEvidence | None:
    """The evidence of the submitted candidate (candidate 0), None when no Answerer acted."""
    last = episode.turns[-1].verifier["agents"] if episode.turns else {}
    return last.get(f"{ANSWERER}_0")


def answer_evidence(action: Action, golds: tuple[str, ...]) -> AnswerEvidence:
    """EM, sub-EM and relaxed EM of a candidate; relaxed EM reads an untagged reply's last line."""
    answer = action.fields.get("answer")
    if answer is None:
        lines = [line for line in action.text.strip().splitlines() if line.strip()]
        fallback = (
            re.sub(r"^\W*(the\s+)?(final\s+)?answer\s*(is)?\s*[:\-]?\s*", "", lines[-1], flags=re.I) if lines else None
        )
        return AnswerEvidence(False, None, False, False, relaxed_match(fallback, golds), UNTAGGED)
    em = exact_match(answer, golds)
    failure = None if answer else EMPTY_CANDIDATE
    return AnswerEvidence(em, answer, em, sub_exact_match(answer, golds), relaxed_match(answer, golds), failure)


def spans(text: str, tag: str) -> list[str]:
    """The stripped contents of the `<tag>…</tag>` spans of `text`, in order."""
    return [s.strip() for s in re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)]


def last_span(text: str, tag: str) -> str | None:
    """The content of the last `<tag>…</tag>` span of `text`, None when there is none."""
    found = spans(text, tag)
    return found[-1] if found else None


def without_spans(text: str, tag: str) -> str:
    """`text` without its `<tag>…</tag>` spans (an unclosed one runs to the end)."""
    return re.sub(rf"<{re.escape(tag)}>.*?(</{re.escape(tag)}>|$)", "", text, flags=re.DOTALL)
