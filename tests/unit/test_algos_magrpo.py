"""MAGRPO return-to-go and alive-set centring, with hand-computed numbers."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator
from verl_masopd.rollout.episode_rows import EpisodeRows


def structure(uids, episodes) -> EpisodeRows:
    """The rows of each episode of each problem, in order of first appearance (the records' layout)."""
    groups: dict = {}
    for row, (uid, episode) in enumerate(zip(uids, episodes, strict=True)):
        groups.setdefault(uid, {}).setdefault(episode, []).append(row)
    return EpisodeRows(tuple(tuple(tuple(rows) for rows in group.values()) for group in groups.values()))


def episodes_batch(rows):
    """rows: (episode_id, uid, agent, turn, num_turns, team, local)."""
    episode, uid, agent, turn, num_turns, team, local = zip(*rows)
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.tensor([[1.0, 1.0, 0.0]] * len(rows)),
            "team_reward": torch.tensor(team),
            "local_reward": torch.tensor(local),
            "local_mask": torch.ones(len(rows)),
        },
        non_tensors={
            "episode_id": np.array(episode, dtype=object),
            "uid": np.array(uid, dtype=object),
            "agent": np.array(agent, dtype=object),
            "turn": np.array(turn, dtype=object),
            "num_turns": np.array(num_turns, dtype=object),
        },
        meta_info={"episode_rows": structure(uid, episode)},
    )


def magrpo(rows, **options):
    config = read_estimator({"adv_estimator": "magrpo", "magrpo": options})
    out = compute_advantages(episodes_batch(rows), config)
    return out.batch["advantages"], out.batch["returns"]


def test_group_with_equal_returns_has_zero_advantage():
    rows = [(f"e{i}", "p", a, 0, 1, 0.7, 0.3 * i) for i in range(4) for a in ("coder_0", "tester_0")]
    advantages, returns = magrpo(rows)
    assert torch.equal(advantages, torch.zeros(8, 3))
    # team only: the local rewards (different per episode) are ignored
    assert torch.allclose(returns[:, 0], torch.full((8,), 0.7))


def test_trajectories_ending_early_leave_the_alive_set():
    # e1 ends after 1 turn (r 1), e2 and e3 last 2 turns (r 0 and 1); γ = 0.5, reward at last turn.
    rows = [
        ("e1", "p", "coder_0", 0, 1, 1.0, 0.0),
        ("e2", "p", "coder_0", 0, 2, 0.0, 0.0),
        ("e3", "p", "coder_0", 0, 2, 1.0, 0.0),
        ("e3", "p", "tester_0", 0, 2, 1.0, 0.0),
        ("e2", "p", "coder_0", 1, 2, 0.0, 0.0),
        ("e3", "p", "coder_0", 1, 2, 1.0, 0.0),
        ("e3", "p", "tester_0", 1, 2, 1.0, 0.0),
    ]
    advantages, returns = magrpo(rows, gamma=0.5)
    # turn 0: R = [1, 0, 0.5] over episodes, mean 0.5 (e3's two agents count once)
    # turn 1: alive e2, e3: R = [0, 1], mean 0.5
    assert torch.allclose(returns[:, 0], torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 1.0, 1.0]))
    assert torch.allclose(advantages[:, 0], torch.tensor([0.5, -0.5, 0.0, 0.0, -0.5, 0.5, 0.5]))
    assert torch.equal(advantages[:, 2], torch.zeros(7))


def test_every_turn_reading_sums_discounted_rewards():
    rows = [
        ("e1", "p", "coder_0", 0, 2, 1.0, 0.0),
        ("e1", "p", "coder_0", 1, 2, 1.0, 0.0),
        ("e2", "p", "coder_0", 0, 1, 1.0, 0.0),
    ]
    advantages, returns = magrpo(rows, gamma=0.5, reward_at="every_turn")
    # e1: R_0 = 1 + 0.5 = 1.5, R_1 = 1 ; e2: R_0 = 1 ; turn 0 mean 1.25 ; turn 1 only e1
    assert torch.allclose(returns[:, 0], torch.tensor([1.5, 1.0, 1.0]))
    assert torch.allclose(advantages[:, 0], torch.tensor([0.25, 0.0, -0.25]))


def test_groups_are_per_problem():
    rows = [("e1", "p", "coder_0", 0, 1, 1.0, 0.0), ("e2", "q", "coder_0", 0, 1, 0.0, 0.0)]
    advantages, _ = magrpo(rows)
    assert torch.equal(advantages, torch.zeros(2, 3))


def test_bad_option_is_named():
    with pytest.raises(ValueError, match="algorithm.magrpo.reward_at"):
        magrpo([("e1", "p", "coder_0", 0, 1, 1.0, 0.0)], reward_at="first_turn")


def test_a_turn_only_one_episode_reached_has_advantage_zero():
    """docs/method.md (groups of one), MAGRPO's per-turn centring: the lone episode alive at turn 1
    is its own baseline."""
    rows = [
        ("e1", "p", "coder_0", 0, 1, 0.5, 0.0),
        ("e2", "p", "coder_0", 0, 2, 0.5, 0.0),
        ("e2", "p", "coder_0", 1, 2, 0.5, 0.0),
    ]
    advantages, _ = magrpo(rows)
    assert torch.equal(advantages, torch.zeros(3, 3))


def test_the_batch_must_carry_its_episodes():
    data = episodes_batch([("e1", "p", "coder_0", 0, 1, 1.0, 0.0)])
    del data.meta_info["episode_rows"]
    config = read_estimator({"adv_estimator": "magrpo"})
    with pytest.raises(
        ValueError, match=r"adv_estimator=magrpo needs the batch's episodes \(meta_info\['episode_rows'\]"
    ):
        compute_advantages(data, config)
