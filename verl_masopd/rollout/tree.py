"""Tree sampling for AT-GRPO: K branches per problem whose groups share identical histories.

Per problem one committed episode E is played. At turn t every agent a samples K responses
y_a^1..y_a^K from its context u_a = render(E, a, t) (one per branch; the contexts are identical
because the branches share E). For each branch k the joint action (y_1^k, ..., y_N^k) is
executed on a fresh copy of E and judged: r_a^k = the role-local reward of a at (t, branch k).
Per agent the best branch k*_a = argmax_k r_a^k (ties: lowest k) is copied to all branches: the
committed turn is a fresh `step` of E with the joint action (y_1^{k*_1}, ..., y_N^{k*_N}), so the
next turn's contexts and rewards are read from the state that action produced.

Result: one `RolloutGroup` per problem of K `EpisodeResult`s (branch k = the k-th candidate of
every (agent, turn)), all sharing E; so the K rows of one (problem, agent, turn) have
the same context u_a — a valid GRPO group. Each result's `judgement` holds E's final team
signal, submission and correctness, and `local[(t, a)]` = branch k's r_a^k: the team signal is
the same for the whole group, so the group advantage is driven by r_a^k, the value the branch
was selected by. An episode that ends at turn t keeps every agent's K samples of turn t.

A turn's K candidates are the manager's `sample_turn` with K copies; stepping and judging are the
manager's too. With the manager's turn barrier every turn waits for all trees; without it each
tree is a task of its own and keeps its per-turn synchronisation (the K candidates of a turn,
sent together and seeded per copy, then the branches' judging and the commit) only within itself.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from dataclasses import dataclass

from verl_masopd.rollout.manager import RolloutManager, check_unique_uids
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup, Sample
from verl_masopd.workflows.base import Action, Episode, Judgement, Reward
from verl_masopd.workflows.problem import Problem

NO_REWARD = Reward(0.0, False)


@dataclass
class _Tree:
    problem: Problem
    episode: Episode
    samples: list[list[Sample]]
    local: list[dict[tuple[int, str], Reward]]
    failed: list[int]
    episode_ids: list[str]


class TreeSampler:
    """Plays problems with K = `branches` branches through `manager`'s backends, workflow and pool."""

    def __init__(self, manager: RolloutManager, branches: int):
        if branches < 2:
            raise ValueError(f"tree sampling needs at least 2 branches, got {branches}")
        self.manager = manager
        self.branches = branches

    async def run(self, problems: Sequence[Problem]) -> list[RolloutGroup]:
        """One group of K results per problem, in problem order, branch-minor."""
        check_unique_uids(problems)
        m, K = self.manager, self.branches
        trees = [self._new_tree(p) for p in problems]

        async def grow(tree: _Tree) -> None:
            while not tree.episode.done:
                await self._turn([tree], keys=[tree.problem.uid])

        if not m.turn_barrier:
            await asyncio.gather(*(grow(tree) for tree in trees))
        else:
            active = list(trees)
            while active:
                await self._turn(active)
                active = [tree for tree in active if not tree.episode.done]
        judgements = await asyncio.gather(*(m.judge(t.episode) for t in trees))
        groups = []
        for tree, final in zip(trees, judgements, strict=True):
            results = [
                EpisodeResult(
                    tree.episode_ids[k],
                    tree.episode,
                    tree.samples[k],
                    Judgement(final.correct, final.team, final.submission, dict(tree.local[k])),
                    tree.failed[k],
                )
                for k in range(K)
            ]
            groups.append(RolloutGroup(tree.problem, results))
        m.metrics.episodes += K * len(trees)
        return groups

    async def _turn(self, trees: list[_Tree], keys: list[str] | None = None) -> None:
        """One turn of each of `trees` (all at the same turn): K candidates per agent, then advance."""
        m, K = self.manager, self.branches
        turn = len(trees[0].episode.turns)
        draws = await m.sample_turn([tree.episode for tree in trees], copies=K, keys=keys)
        advancing = []
        for tree, joints in zip(trees, draws, strict=True):
            for k, joint in enumerate(joints):
                for draw in joint.values():
                    tree.samples[k].append(draw.sample(tree.episode_ids[k], k, turn))
                    tree.failed[k] += draw.failed
            advancing.append(self._advance(tree, turn, [{n: d.action for n, d in j.items()} for j in joints]))
        await asyncio.gather(*advancing)
        m.metrics.turns += len(trees)

    def _new_tree(self, problem: Problem) -> _Tree:
        K = self.branches
        base_id, episode = self.manager.new_episode(problem)
        return _Tree(
            problem,
            episode,
            [[] for _ in range(K)],
            [{} for _ in range(K)],
            [0] * K,
            [f"{base_id}/b{k}" for k in range(K)],
        )

    async def _advance(self, tree: _Tree, turn: int, branch_actions: list[dict[str, Action]]) -> None:
        """Judge every branch on its own copy of E, then commit each agent's best branch to E."""
        m = self.manager

        async def play_branch(actions: dict[str, Action]) -> Judgement:
            branch = copy.deepcopy(tree.episode)
            await m.step(branch, actions)
            return await m.judge(branch)

        judged = await asyncio.gather(*(play_branch(a) for a in branch_actions))
        committed = {}
        for name in branch_actions[0]:  # the agents scheduled at this turn
            rewards = [j.local.get((turn, name), NO_REWARD) for j in judged]
            for k, reward in enumerate(rewards):
                tree.local[k][turn, name] = reward
            best = max(range(len(rewards)), key=lambda k: (rewards[k].value, -k))
            committed[name] = branch_actions[best][name]
        await m.step(tree.episode, committed)
