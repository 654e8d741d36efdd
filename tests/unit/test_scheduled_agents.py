"""Scheduled agents: a workflow decides who acts at each turn and brings seats into play during an
episode (a Leader that sends a wave of k Workers, k read from its reply), played by the real
rollout manager; the default schedule is every agent at every turn."""

from __future__ import annotations

import asyncio
import re

import pytest

from verl_masopd.rollout.backend import Generation
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import STOP
from verl_masopd.workflows.base import Action, Agent, Episode, Judgement, Turn, Workflow
from verl_masopd.workflows.math import MathWorkflow
from verl_masopd.workflows.problem import Problem

LEADER, WORKER = "leader", "worker"


class Wave(Workflow):
    """Turn 0: the Leader asks for k Workers ("send k"); turn 1: the k Workers report; turn 2: the
    Leader answers from the reports and the episode ends."""

    name, domain, roles = "wave", "math", (LEADER, WORKER)

    def __init__(self):
        super().__init__(horizon=3)
        self.agents = (Agent("leader_0", LEADER, 0), *(Agent(f"worker_{i}", WORKER, i) for i in range(4)))

    def starting_agents(self):
        return tuple(a for a in self.agents if a.role == LEADER)

    def schedule(self, episode):
        role = WORKER if len(episode.turns) == 1 else LEADER
        return tuple(a for a in episode.agents if a.role == role)

    def render(self, episode, agent, turn, role=None):
        reports = " | ".join(a.text for t in episode.turns[:turn] for a in t.actions.values() if a.agent.role == WORKER)
        return [
            {"role": "system", "content": role or agent.role},
            {"role": "user", "content": f"{agent.name} {reports}"},
        ]

    def parse(self, agent, text):
        return Action(agent, text)

    def step(self, episode, actions):
        if set(actions) != {a.name for a in self.schedule(episode)}:
            raise ValueError(f"unexpected actors {sorted(actions)}")
        if len(episode.turns) == 0:
            k = int(re.search(r"send (\d)", actions["leader_0"].text).group(1))
            for _ in range(k):
                self.spawn(episode, WORKER)
        turn = Turn(len(episode.turns), dict(actions), "", agreed=False)
        episode.turns.append(turn)
        episode.done = len(episode.turns) == 3
        return turn

    def judge(self, episode):
        return Judgement(correct=True, team=1.0, submission=episode.turns[-1].actions["leader_0"].text)

    def attribute(self, episode, turn):
        return None


class Scripted:
    """Leader: "send 2" at first, then the number of reports it sees; Workers: their seat name."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prompts: list[str] = []

    async def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            self.prompts.append(text)
            if "worker_" in text:
                reply = "report"
            elif "report" in text:
                reply = f"answer from {text.count('report')} reports"
            else:
                reply = "send 2"
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            out.append(Generation(ids, [-0.1] * len(ids), STOP))
        return out


def test_a_leader_sends_a_wave_of_workers_and_answers_from_their_reports(tiny_tokenizer):
    workflow = Wave()
    backend = Scripted(tiny_tokenizer)
    with RolloutManager(workflow, {LEADER: backend, WORKER: backend}, tiny_tokenizer) as manager:
        [group] = asyncio.run(manager.run([Problem(uid="q", domain="math", statement="s", answer="1")]))
    [result] = group.episodes
    episode = result.episode
    assert [sorted(t.actions) for t in episode.turns] == [["leader_0"], ["worker_0", "worker_1"], ["leader_0"]]
    assert [a.name for a in episode.agents] == ["leader_0", "worker_0", "worker_1"]
    assert result.judgement.submission == "answer from 2 reports"
    assert [(s.turn, s.agent) for s in result.samples] == [
        (0, "leader_0"),
        (1, "worker_0"),
        (1, "worker_1"),
        (2, "leader_0"),
    ]
    batch = to_dataproto([group], None, 256, 16, tiny_tokenizer.pad_token_id)
    assert list(batch.non_tensor_batch["role"]) == [LEADER, WORKER, WORKER, LEADER]
    assert list(batch.non_tensor_batch["num_turns"]) == [3] * 4


def test_spawning_past_the_seats_is_an_error_naming_the_role():
    workflow = Wave()
    episode = workflow.reset(Problem(uid="q", domain="math", statement="s", answer="1"))
    for _ in range(4):
        workflow.spawn(episode, WORKER)
    with pytest.raises(ValueError, match="4 seat\\(s\\) of role 'worker', all in play"):
        workflow.spawn(episode, WORKER)


def test_the_default_schedule_is_every_agent_every_turn():
    workflow = MathWorkflow(agents_per_role=2)
    episode = workflow.reset(Problem(uid="q", domain="math", statement="s", answer="1"))
    assert workflow.schedule(episode) == workflow.agents == episode.agents
    assert [a.name for a in workflow.agents] == ["reasoner_0", "reasoner_1", "tool_user_0", "tool_user_1"]
    assert isinstance(episode, Episode) and all(isinstance(a, Agent) for a in episode.agents)
