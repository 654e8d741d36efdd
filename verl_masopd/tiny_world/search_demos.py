"""Demonstrations of the tiny search world for pretraining: every role of the search workflow,
rendered by the workflow itself (compact prompts, the small budgets of `OPTIONS`) on real BM25
retrieval over the search world's corpus.

A demonstration is one turn of a correct episode of a training question (search_tasks.task(i),
i in [0, VALIDATION_START)), played through `SearchWorkflow.step`:
  - Leader (hierarchical): a one-hop question is sent as it is (`<subtask>q</subtask>`); a
    two-hop one as its first sub-question, then, once the report names the bridge, the second
    sub-question formed from it; then the reports go to the Answerer (`<select>1</select>`,
    `<select>1, 2</select>`).
  - Searcher: `<search>subtask</search>`, the real observation, and `<summary>the fact</summary>`
    when the entity's own passage came back; otherwise first a second search with the entity's
    kind appended to the subtask (the reformulation that finds it, search_world_retrieval.json).
    In the cascaded system the Searcher's task is the whole question: a two-hop one is searched
    as it is, then as its second sub-question formed from the bridge the first observation names.
  - Answerer: `<answer>the last selected report</answer>`.
  - Judge (the teacher's only, for the Prompted Critic comparator): a Searcher's reply to a
    one-hop subtask put to the judge (`SearchWorkflow.judge_messages`), answered "yes" for the
    correct reply above and "no", as often, for a wrong one: the confused guess below, or the
    searched reply reporting another entity's value of the relation in place of the one found.
A reply's observations are clipped to `max_obs_tokens` token ids as the rollout clips them and are
kept as their own segments, which the pretraining loss does not see (pretrain.collate). Questions
whose episode would need more calls than `max_calls` (a cascaded two-hop search whose first or
second search misses) are redrawn.

The teacher's demonstrations are of the cascaded system (the system it is made in), the
student's of the hierarchical one. With `role_confusion` = c > 0 (the student's), a share c of
the Searcher's replies is written in the Answerer's format: a guess `<answer>v</answer>` with no
search (v the same relation's value of a random entity of the kind), which leaves the report
empty; a weakness for role-conditioned distillation to remove.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verl_masopd.retrieval.index import build_index
from verl_masopd.tiny_world.search_kb import knowledge_base, write_corpus
from verl_masopd.tiny_world.search_tasks import VALIDATION_START, SearchTask, golden_answers, task
from verl_masopd.tokens.chat import encode_text
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.base import Agent, Episode
from verl_masopd.workflows.problem import QA, Problem
from verl_masopd.workflows.search import ANSWERER, CASCADED, HIERARCHICAL, LEADER, SEARCHER

JUDGE = "judge"
OPTIONS = dict(
    max_waves=2,
    max_searchers_per_wave=2,
    max_calls=2,
    topk=3,
    max_obs_tokens=240,
    answer_candidates=2,
    prompt_style="compact",
)
HORIZONS = {HIERARCHICAL: 2 * OPTIONS["max_waves"] + 2, CASCADED: 2}
ROLE_SHARES = {
    HIERARCHICAL: {LEADER: 0.3, SEARCHER: 0.5, ANSWERER: 0.2},
    CASCADED: {SEARCHER: 0.6, ANSWERER: 0.2, JUDGE: 0.2},
}
INDEX = Path(tempfile.gettempdir()) / "verl_masopd_tiny_search_world"
TRIES = 64


def search_index(folder: Path = INDEX) -> Path:
    """The BM25 index of the search world's corpus under `folder` (built once; rebuilt only when
    the corpus changes)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder / "corpus.jsonl")
    build_index(folder / "corpus.jsonl", folder / "index")
    return folder / "index"


def search_workflow(system: str, retriever: str | Path):
    """The search workflow the tiny search models are built for and evaluated in."""
    return make_workflow("search", QA, 1, HORIZONS[system], retriever=str(retriever), system=system, **OPTIONS)


@dataclass(frozen=True)
class Hop:
    """What a one-hop (sub-)question asks: the fact `relation` of the entity `name` of `kind`,
    `value` as its passage states it."""

    question: str
    name: str
    kind: str
    relation: str
    value: str


@dataclass(frozen=True)
class Demonstration:
    """One turn's context and reply; `segments` are the reply's token ids in order, each marked
    trained (generated text) or not (an observation)."""

    task: SearchTask
    messages: list[dict]
    reply: str
    segments: tuple[tuple[tuple[int, ...], bool], ...]


def hops(t: SearchTask) -> tuple[Hop, ...]:
    """The one-hop questions of `t`: itself, or its two sub-questions (subject, then bridge)."""
    kb = knowledge_base()
    relations = [fact.split(".")[1] for fact in t.type.split(">")]
    if t.hops == 1:
        return (Hop(t.question, t.subject, kb.entity(t.subject).kind, relations[0], t.answers[0]),)
    return (
        Hop(t.sub_questions[0], t.subject, kb.entity(t.subject).kind, relations[0], t.bridge),
        Hop(t.sub_questions[1], t.bridge, kb.entity(t.bridge).kind, relations[1], t.answers[0]),
    )


class SearchDemonstrations:
    """Draws demonstrations of training questions for the compact search workflow of `system`."""

    def __init__(self, tokenizer, system: str, role_confusion: float = 0.0, retriever: str | Path | None = None):
        self.tokenizer = tokenizer
        self.system = system
        self.workflow = search_workflow(system, retriever or search_index())
        self.role_confusion = role_confusion
        self.kb = knowledge_base()

    def draw(self, rng: random.Random) -> Demonstration:
        shares = ROLE_SHARES[self.system]
        role = rng.choices(list(shares), weights=list(shares.values()))[0]
        for _ in range(TRIES):
            t = task(rng.randrange(VALIDATION_START))
            if role == JUDGE:
                judged = self._judgement(t, rng)
                if judged is not None:
                    return judged
                continue
            played = self.episode(t)
            if played is None:
                continue
            _, messages, segments = rng.choice([turn for turn in played[1] if turn[0].role == role])
            if role == SEARCHER and rng.random() < self.role_confusion:
                segments = [(self._guess(t, messages, rng), True)]
            return self._demonstration(t, messages, segments)
        raise RuntimeError(f"no {self.system} search episode within {TRIES} draws")

    def episode(self, t: SearchTask) -> tuple[Episode, list[tuple[Agent, list[dict], list[tuple[str, bool]]]]] | None:
        """The correct episode of `t` played through the workflow, and every acting agent's
        (agent, context, reply segments (text, trained)) in it; None when it needs more calls
        than allowed."""
        problem = Problem(uid=f"tiny-search-{t.index}", domain=QA, statement=t.question, answers=t.answers)
        episode = self.workflow.reset(problem)
        plan = hops(t)
        played = []
        if self.system == CASCADED:
            searched = self._cascaded_search(t, plan)
            if searched is None:
                return None
            played.append(self._act(episode, {episode.agents[0]: searched}))
        else:
            for hop in plan:
                leader = self.workflow.schedule(episode)[0]
                played.append(self._act(episode, {leader: [(f"<subtask>{hop.question}</subtask>", True)]}))
                searched = self._search(hop)
                if searched is None:
                    return None
                played.append(self._act(episode, {self.workflow.schedule(episode)[0]: searched}))
            chosen = ", ".join(str(n) for n in range(1, len(plan) + 1))
            played.append(
                self._act(episode, {self.workflow.schedule(episode)[0]: [(f"<select>{chosen}</select>", True)]})
            )
        answerers = self.workflow.schedule(episode)
        report = episode.turns[-1 if self.system == CASCADED else -2].verifier["agents"]
        last = [e.summary for e in report.values()][-1]
        played.append(self._act(episode, {a: [(f"<answer>{last}</answer>", True)] for a in answerers}))
        return episode, [turn for turns in played for turn in turns]

    def _act(self, episode: Episode, replies: dict[Agent, list[tuple[str, bool]]]) -> list:
        """Render every agent's context, then step the workflow with their parsed replies."""
        turn = len(episode.turns)
        played = [(agent, self.workflow.render(episode, agent, turn), segments) for agent, segments in replies.items()]
        actions = {
            agent.name: self.workflow.parse(agent, "".join(text for text, _ in segments))
            for agent, segments in replies.items()
        }
        self.workflow.step(episode, actions)
        return played

    def _observe(self, reply: str) -> str:
        """The observation for the call that ends `reply`, clipped to max_obs_tokens as the rollout does."""
        text = self.workflow.search_tool.run(reply).text
        ids = encode_text(self.tokenizer, text)
        return self.tokenizer.decode(ids[: self.workflow.search_tool.max_observation_tokens])

    def _found(self, observation: str, name: str) -> bool:
        """Whether the whole own passage of entity `name` is in the observation."""
        passage = self.kb.passage(self.kb.passage_id(name))
        return f"(Title: {passage.title}) {passage.text}" in observation

    def _search(self, hop: Hop) -> list[tuple[str, bool]] | None:
        """A Searcher's reply to a one-hop subtask: search, re-search with the kind on a miss, report."""
        segments: list[tuple[str, bool]] = []
        reply = ""
        for query in (hop.question, f"{hop.question} {hop.kind}"):
            call = f"<search>{query}</search>"
            observation = self._observe(reply + call)
            segments += [(call, True), (observation, False)]
            reply += call + observation
            if self._found(observation, hop.name):
                return [*segments, (f"<summary>{hop.value}</summary>", True)]
        return None

    def _cascaded_search(self, t: SearchTask, plan: tuple[Hop, ...]) -> list[tuple[str, bool]] | None:
        """A cascaded Searcher's reply to the whole question: one-hop as `_search`; two-hop the
        question, then the second sub-question, each finding its entity's passage."""
        if t.hops == 1:
            return self._search(plan[0])
        segments: list[tuple[str, bool]] = []
        reply = ""
        for query, hop in ((t.question, plan[0]), (plan[1].question, plan[1])):
            call = f"<search>{query}</search>"
            observation = self._observe(reply + call)
            if not self._found(observation, hop.name):
                return None
            segments += [(call, True), (observation, False)]
            reply += call + observation
        return [*segments, (f"<summary>{plan[1].value}</summary>", True)]

    def _guess(self, t: SearchTask, messages: list[dict], rng: random.Random) -> str:
        """A confused Searcher's reply: an answer guessed without searching."""
        subtask = messages[-1]["content"]
        hop = next(h for h in hops(t) if h.question in subtask)
        return f"<answer>{self._other_value(hop, rng)}</answer>"

    def _other_value(self, hop: Hop, rng: random.Random) -> str:
        """The value of `hop`'s relation of a random entity of its kind (possibly the right one)."""
        others = [e for e in self.kb.of_kind(hop.kind) if hop.relation in e.facts]
        return golden_answers(rng.choice(others), hop.relation)[0]

    def _judgement(self, t: SearchTask, rng: random.Random) -> Demonstration | None:
        """The judge's verdict on a Searcher's reply to one of `t`'s one-hop subtasks (module doc);
        None when the search would need more calls than allowed."""
        hop = rng.choice(hops(t))
        segments = self._search(hop)
        if segments is None:
            return None
        approve, reject = self.workflow.judge_verdicts
        verdict = approve
        if rng.random() < 0.5:
            wrong = next((v for v in (self._other_value(hop, rng) for _ in range(TRIES)) if v != hop.value), None)
            if wrong is None:
                return None
            verdict = reject
            if rng.random() < 0.5:
                segments = [(f"<answer>{wrong}</answer>", True)]
            else:
                summary = self.workflow.tags["summary"]
                segments = [*segments[:-1], (f"<{summary}>{wrong}</{summary}>", True)]
        reply = "".join(text for text, _ in segments)
        return self._demonstration(t, self.workflow.judge_messages(hop.question, reply), [(verdict, True)])

    def _demonstration(self, t: SearchTask, messages: list[dict], segments: list[tuple[str, bool]]) -> Demonstration:
        encoded = tuple((tuple(encode_text(self.tokenizer, text)), trained) for text, trained in segments)
        return Demonstration(t, messages, "".join(text for text, _ in segments), encoded)
