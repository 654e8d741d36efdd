"""Tree sampling (AT-GRPO) over a real Workflow subclass ("guess") with a scripted backend, and a
test per known defect of the Stronger-MAS reference code (docs/method.md, "Reference implementations")."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, defaultdict

import pytest

from verl_masopd.rollout.backend import Generation, request_seed
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.tree import TreeSampler
from verl_masopd.workflows.base import Action, Judgement, Reward, Turn, Workflow
from verl_masopd.workflows.problem import Problem

TARGET = 5


class GuessWorkflow(Workflow):
    """The lead guesses a number (local reward −|x − 5|); the follower must repeat the lead's
    number of the same turn (local reward −|y − x|, a reward that depends on the joint action).
    Agreement: y = x. Both see both numbers of the previous turn."""

    name, domain, roles = "guess", "math", ("lead", "follow")

    def render(self, episode, agent, turn, role=None):
        seen = ",".join(f"{n}={a.text}" for n, a in sorted(episode.turns[turn - 1].actions.items())) if turn else "-"
        return [{"role": "user", "content": f"Problem {episode.problem.uid} turn {turn} seat {agent.name} seen {seen}"}]

    def parse(self, agent, text):
        ok = text.strip().isdigit()
        return Action(agent, text, {"n": text.strip()} if ok else {}, None if ok else "not a number")

    def step(self, episode, actions):
        x, y = (actions[n].fields.get("n") for n in ("lead_0", "follow_0"))
        turn = Turn(len(episode.turns), actions, report="", agreed=x is not None and x == y)
        episode.turns.append(turn)
        episode.done = turn.agreed or len(episode.turns) >= self.horizon
        return turn

    def judge(self, episode):
        local = {}
        for t in episode.turns:
            x, y = (int(t.actions[n].fields.get("n", -99)) for n in ("lead_0", "follow_0"))
            local[t.index, "lead_0"] = Reward(-abs(x - TARGET), True)
            local[t.index, "follow_0"] = Reward(-abs(y - x), True)
        last = episode.turns[-1]
        correct = last.agreed and last.actions["lead_0"].fields["n"] == str(TARGET)
        return Judgement(correct, float(correct), last.actions["lead_0"].text, local)

    def attribute(self, episode, turn):
        return None


class BranchScriptBackend:
    """The k-th copy of an identical prompt in one call gets SCRIPT[(uid, turn, seat)][k]."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.prompts: list[str] = []

    async def generate(self, prompts, sampling):
        copies = Counter()
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p)
            self.prompts.append(text)
            uid, turn, seat = re.search(r"Problem (\w+) turn (\d+) seat (\w+)", text).groups()
            k = copies[text]
            copies[text] += 1
            ids = self.tokenizer.encode(str(self.script[uid, int(turn), seat][k]), add_special_tokens=False) + [
                self.eos
            ]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        return out

    def update_weights(self, state_dict, version):
        pass


SCRIPT = {
    ("p0", 0, "lead_0"): [3, 5, 8],
    ("p0", 0, "follow_0"): [3, 9, 5],
    ("p0", 1, "lead_0"): [5, 5, 5],
    ("p0", 1, "follow_0"): [5, 4, 6],
    ("p1", 0, "lead_0"): [5, 5, 5],
    ("p1", 0, "follow_0"): [5, 5, 5],
    ("p2", 0, "lead_0"): [1, 2, 3],
    ("p2", 0, "follow_0"): [1, 2, 3],
    ("p2", 1, "lead_0"): [4, 5, 6],
    ("p2", 1, "follow_0"): [6, 5, 4],
}


def problems(*uids):
    return [Problem(uid=u, domain="math", statement="guess", answer="5") for u in uids]


async def run_tree(tokenizer, uids, branches=3):
    backends = {r: BranchScriptBackend(tokenizer, SCRIPT) for r in ("lead", "follow")}
    with RolloutManager(GuessWorkflow(horizon=2), backends, tokenizer) as m:
        return await TreeSampler(m, branches).run(problems(*uids)), backends


async def test_branch_rewards_come_from_each_branchs_own_joint_action(tiny_tokenizer):
    [group] = (await run_tree(tiny_tokenizer, ["p0"]))[0]
    results = group.episodes
    assert group.uid == "p0" and len(results) == 3
    assert [r.episode_id.endswith(f"/b{k}") for k, r in enumerate(results)] == [True] * 3
    lead = [r.judgement.local[0, "lead_0"].value for r in results]
    follow = [r.judgement.local[0, "follow_0"].value for r in results]
    assert lead == [-2, 0, -3]  # −|x_k − 5| for x = 3, 5, 8
    assert follow == [0, -4, -3]  # −|y_k − x_k| for (x, y) = (3, 3), (5, 9), (8, 5)
    # the last agent of the turn gets distinct rewards: a non-zero group advantage
    assert len(set(follow)) == 3


async def test_best_branch_per_agent_committed_and_next_prompts_read_it(tiny_tokenizer):
    [group], backends = await run_tree(tiny_tokenizer, ["p0"])
    results = group.episodes
    episode = results[0].episode
    assert all(r.episode is episode for r in results)
    # lead's best branch is k=1 (5), follow's is k=0 (3): committed turn 0 = (5, 3), no agreement
    assert {n: a.text for n, a in episode.turns[0].actions.items()} == {"lead_0": "5", "follow_0": "3"}
    assert not episode.turns[0].agreed
    turn1 = [p for p in backends["lead"].prompts + backends["follow"].prompts if "turn 1" in p]
    assert len(turn1) == 6 and all("seen follow_0=3,lead_0=5" in p for p in turn1)
    # turn 1: every follow branch is scored against its own lead (all 5): −|y − 5| for y = 5, 4, 6
    assert [r.judgement.local[1, "follow_0"].value for r in results] == [0, -1, -1]
    assert episode.turns[1].agreed and len(episode.turns) == 2
    assert all(r.judgement.correct and r.judgement.team == 1.0 for r in results)


async def test_groups_share_identical_histories_and_never_merge_problems(tiny_tokenizer):
    rollout_groups, _ = await run_tree(tiny_tokenizer, ["p0", "p1", "p2"])
    assert [g.uid for g in rollout_groups] == ["p0", "p1", "p2"]
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    for policy in ("lead", "follow"):
        batch = to_dataproto(rollout_groups, policy, max_prompt_len=512, max_response_len=8, pad_id=eos)
        groups = defaultdict(list)
        for b in range(len(batch)):
            nt = batch.non_tensor_batch
            groups[nt["uid"][b], nt["turn"][b], nt["agent"][b]].append(b)
        assert sorted(groups) == sorted(
            (u, t, f"{policy}_0") for u, t in [("p0", 0), ("p0", 1), ("p1", 0), ("p2", 0), ("p2", 1)]
        )
        for rows in groups.values():
            assert len(rows) == 3
            assert sorted(batch.non_tensor_batch["branch"][rows]) == [0, 1, 2]
            prompts = batch.batch["prompts"][rows]
            assert (prompts == prompts[0]).all()


async def test_early_termination_keeps_every_agents_final_samples(tiny_tokenizer):
    [group], _ = await run_tree(tiny_tokenizer, ["p1"])
    results = group.episodes
    assert len(results[0].episode.turns) == 1 and results[0].episode.turns[0].agreed
    for r in results:
        assert [(s.turn, s.agent) for s in r.samples] == [(0, "lead_0"), (0, "follow_0")]
    batch = to_dataproto([group], "follow", 512, 8, 0)
    assert len(batch) == 3 and list(batch.non_tensor_batch["is_last_turn"]) == [True] * 3


def test_tree_needs_two_branches(tiny_tokenizer):
    backends = {r: BranchScriptBackend(tiny_tokenizer, SCRIPT) for r in ("lead", "follow")}
    with RolloutManager(GuessWorkflow(), backends, tiny_tokenizer) as m, pytest.raises(ValueError, match="2 branches"):
        TreeSampler(m, 1)


class SeededBranchBackend(BranchScriptBackend):
    """Without the turn barrier each candidate is its own call: copy k is read from its seed
    (request_seed(uid, turn, seat, k), segment 0); a reply of problem p takes `delays[p]` seconds.
    Logs (uid, turn, "start" | "end", time)."""

    def __init__(self, tokenizer, script, delays, log, branches=3):
        super().__init__(tokenizer, script)
        self.delays, self.log, self.branches = delays, log, branches

    async def generate(self, prompts, sampling):
        [prompt] = prompts
        text = self.tokenizer.decode(prompt)
        self.prompts.append(text)
        uid, turn, seat = re.search(r"Problem (\w+) turn (\d+) seat (\w+)", text).groups()
        self.log.append((uid, int(turn), "start", time.perf_counter()))
        copy = {request_seed(request_seed(uid, turn, seat, k), 0): k for k in range(self.branches)}
        await asyncio.sleep(self.delays[uid])
        ids = self.tokenizer.encode(
            str(self.script[uid, int(turn), seat][copy[sampling.seed]]), add_special_tokens=False
        )
        self.log.append((uid, int(turn), "end", time.perf_counter()))
        return [Generation(ids + [self.eos], [-0.5] * (len(ids) + 1), "stop")]


async def test_without_the_barrier_each_tree_keeps_its_turn_sync_and_only_there(tiny_tokenizer):
    lockstep, _ = await run_tree(tiny_tokenizer, ["p0", "p1", "p2"])
    log = []
    delays = {"p0": 0.3, "p1": 0.0, "p2": 0.0}
    backends = {r: SeededBranchBackend(tiny_tokenizer, SCRIPT, delays, log) for r in ("lead", "follow")}
    with RolloutManager(GuessWorkflow(horizon=2), backends, tiny_tokenizer, turn_barrier=False) as m:
        free = await TreeSampler(m, 3).run(problems("p0", "p1", "p2"))

    def view(groups):
        return [
            (r.episode_id, s.turn, s.agent, s.branch, s.response_ids, sorted(r.judgement.local.items()))
            for g in groups
            for r in g.episodes
            for s in r.samples
        ]

    assert view(free) == view(lockstep)
    for uid in ("p0", "p2"):  # within a tree: turn 1 starts after every candidate of turn 0 ended
        turn0_end = max(t for u, turn, what, t in log if (u, turn, what) == (uid, 0, "end"))
        assert min(t for u, turn, what, t in log if (u, turn, what) == (uid, 1, "start")) > turn0_end
    # across trees no sync: the fast tree p2 played its turn 1 before slow p0's turn 0 came back
    p0_first = min(t for u, turn, what, t in log if (u, turn, what) == ("p0", 0, "end"))
    assert max(t for u, turn, what, t in log if (u, turn, what) == ("p2", 1, "end")) < p0_first
