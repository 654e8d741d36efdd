"""A rollout without the turn barrier whose episodes are scored by the teacher as they finish
(verl_masopd/teacher/overlap.py), with a timed event log: a two-role workflow whose agents agree at
a scripted turn, a scripted backend with a reply delay per problem, and the teacher scoring of the
records (any `TeacherScorer`). Shared by the unit test (a teacher server stand-in) and the
integration test (verl's engine)."""

from __future__ import annotations

import asyncio
import copy
import re
import time

from verl_masopd.rollout.backend import Generation
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import episodes_of
from verl_masopd.teacher.attribution import Attributor
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.overlap import Scored, ScoringAsDone
from verl_masopd.teacher.scoring import TeacherScoring
from verl_masopd.workflows.base import Action, Episode, Judgement, Reward, Turn, Workflow
from verl_masopd.workflows.problem import Problem


class AgreeWorkflow(Workflow):
    """Two roles state an answer; the episode ends when they agree (or at the horizon)."""

    name, domain, roles = "agree", "math", ("asker", "checker")

    def render(self, episode, agent, turn, role=None):
        seen = "; ".join(f"{n}={a.text}" for n, a in sorted(episode.turns[turn - 1].actions.items())) if turn else ""
        return [
            {"role": "system", "content": f"You are {role or agent.role}."},
            {"role": "user", "content": f"Problem {episode.problem.uid}: turn {turn} seat {agent.name} seen [{seen}]"},
        ]

    def parse(self, agent, text):
        return Action(agent, text, {"answer": text.strip()})

    def step(self, episode: Episode, actions: dict[str, Action]) -> Turn:
        agreed = len({a.fields["answer"] for a in actions.values()}) == 1
        turn = Turn(len(episode.turns), actions, report="", agreed=agreed)
        episode.turns.append(turn)
        episode.done = agreed or len(episode.turns) >= self.horizon
        return turn

    def judge(self, episode):
        answer = episode.turns[-1].actions["asker_0"].fields["answer"]
        local = {
            (t.index, n): Reward(float(a.fields["answer"] == "7"), True)
            for t in episode.turns
            for n, a in t.actions.items()
        }
        return Judgement(answer == "7", float(answer == "7"), answer, local)

    def attribute(self, episode, turn):
        return None


class DelayedBackend:
    """Replies "7" from turn agree_at[problem] on (before: the seat's name), after delay[problem]
    seconds; logs (problem, turn, "reply", end time)."""

    def __init__(self, tokenizer, agree_at: dict[str, int], delay: dict[str, float], log: list):
        self.tokenizer, self.agree_at, self.delay, self.log = tokenizer, agree_at, delay, log

    async def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            uid, turn, seat = re.search(r"Problem (\w+): turn (\d+) seat (\w+)", self.tokenizer.decode(prompt)).groups()
            await asyncio.sleep(self.delay[uid])
            text = "7" if int(turn) >= self.agree_at[uid] else seat
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
            self.log.append((uid, int(turn), "reply", time.perf_counter()))
        return out


def teacher_scoring(tokenizer, scorer) -> TeacherScoring:
    return TeacherScoring(TeacherContextBuilder(AgreeWorkflow(), tokenizer, max_length=4096), scorer, 1)


async def rollout_scored(tokenizer, scorer, agree_at: dict[str, int], delay: dict[str, float]):
    """(results, event log, merged report, seconds the drain waited) of one rollout of one episode per
    problem, scored as the episodes finish. The log holds the replies, ("done", uid) when an episode
    is handed over, and ("score", batch uids) at the start and end of each scoring batch."""
    log: list = []
    scoring, attributor = teacher_scoring(tokenizer, scorer), Attributor(AgreeWorkflow())

    async def score(batch) -> Scored:
        uids = tuple(r.episode.problem.uid for r in batch)
        log.append((uids, None, "score_start", time.perf_counter()))
        attributions = await attributor.attribute({r.episode_id: r.episode for r in batch})
        stats = await scoring.score(batch, attributions)
        log.append((uids, None, "score_end", time.perf_counter()))
        return Scored(stats, attributions)

    backends = {r: DelayedBackend(tokenizer, agree_at, delay, log) for r in AgreeWorkflow.roles}
    overlap = ScoringAsDone(score)

    def done(result):
        log.append((result.episode.problem.uid, None, "done", time.perf_counter()))
        overlap.add(result)

    problems = [Problem(uid=u, domain="math", statement="3+4", answer="7") for u in agree_at]
    with RolloutManager(AgreeWorkflow(horizon=4), backends, tokenizer, turn_barrier=False) as manager:
        results = episodes_of(await manager.run(problems, on_episode_done=done))
    start = time.perf_counter()
    report = await overlap.drain(results)
    return results, log, report, time.perf_counter() - start


async def scored_after(tokenizer, scorer, results):
    """Copies of `results` scored after the rollout, in one batch (the lockstep trainer's way)."""
    copies = copy.deepcopy(results)
    for sample in (s for r in copies for s in r.samples):
        sample.teacher = None
    attributions = await Attributor(AgreeWorkflow()).attribute({r.episode_id: r.episode for r in copies})
    stats = await teacher_scoring(tokenizer, scorer).score(copies, attributions)
    return copies, stats
