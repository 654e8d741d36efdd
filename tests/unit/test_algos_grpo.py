"""Rewards combination, GRPO grouping keys and AT-GRPO groups, with hand-computed numbers."""

import math

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator
from verl_masopd.algos.rewards import RewardWeights, combine_rewards, place_on_last_token


def objects(*values):
    return np.array(values, dtype=object)


def batch(team, local, local_mask, uid, role, agent, turn, response_length=2):
    rows = len(team)
    return DataProto.from_dict(
        tensors={
            "response_mask": torch.ones(rows, response_length),
            "team_reward": torch.tensor(team, dtype=torch.float32),
            "local_reward": torch.tensor(local, dtype=torch.float32),
            "local_mask": torch.tensor(local_mask, dtype=torch.float32),
        },
        non_tensors={"uid": objects(*uid), "role": objects(*role), "agent": objects(*agent), "turn": objects(*turn)},
    )


def config(estimator, **algorithm):
    return read_estimator({"adv_estimator": estimator, **algorithm})


def test_combined_reward_respects_weights_and_mask():
    team = torch.tensor([1.0, 0.5, 0.0])
    local = torch.tensor([0.8, 0.4, 0.9])
    mask = torch.tensor([1.0, 0.0, 1.0])
    weights = RewardWeights(team_weight=2.0, local_weight=0.5)
    # 2·1 + 0.5·0.8 = 2.4 ; 2·0.5 + 0 (masked) = 1.0 ; 0 + 0.5·0.9 = 0.45
    assert torch.allclose(combine_rewards(team, local, mask, weights), torch.tensor([2.4, 1.0, 0.45]))
    assert torch.allclose(combine_rewards(team, local, mask, weights, use_local=False), torch.tensor([2.0, 1.0, 0.0]))


def test_negative_weight_names_the_key():
    with pytest.raises(ValueError, match="algorithm.reward.local_weight"):
        RewardWeights(local_weight=-1.0)


def test_reward_lands_on_last_response_token():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    placed = place_on_last_token(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert torch.equal(placed, torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [4.0, 0.0, 0.0]]))


# rows: one problem, coder at turns 0, 0, 1, 1; combined rewards 1, 0, 1, 1
GRPO_ROWS = dict(
    team=[1.0, 0.0, 0.5, 1.0],
    local=[0.0, 0.0, 0.5, 0.0],
    local_mask=[1, 1, 1, 1],
    uid=["p", "p", "p", "p"],
    role=["coder"] * 4,
    agent=["coder_0"] * 4,
    turn=[0, 0, 1, 1],
)


def test_grpo_group_by_problem():
    out = compute_advantages(batch(**GRPO_ROWS), config("grpo", grpo={"group_by": "problem"}))
    # mean 0.75, unbiased std 0.5 → (r − 0.75) / 0.5
    expected = torch.tensor([0.5, -1.5, 0.5, 0.5])
    assert torch.allclose(out.batch["advantages"][:, 0], expected, atol=1e-4)
    assert torch.allclose(out.batch["advantages"][:, 1], expected, atol=1e-4)


def test_grpo_group_by_problem_role_turn():
    out = compute_advantages(batch(**GRPO_ROWS), config("grpo", grpo={"group_by": "problem_role_turn"}))
    # turn 0: [1, 0], mean 0.5, std √0.5 → ±0.7071; turn 1: [1, 1], std 0 → 0
    half = 0.5 / math.sqrt(0.5)
    assert torch.allclose(out.batch["advantages"][:, 0], torch.tensor([half, -half, 0.0, 0.0]), atol=1e-4)


def test_grpo_group_by_problem_role_without_std():
    rows = dict(GRPO_ROWS, role=["coder", "coder", "tester", "tester"])
    out = compute_advantages(
        batch(**rows), config("grpo", grpo={"group_by": "problem_role"}, norm_adv_by_std_in_grpo=False)
    )
    # coder [1, 0] → ±0.5 ; tester [1, 1] → 0
    assert torch.allclose(out.batch["advantages"][:, 0], torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_grpo_unknown_group_key_is_named():
    with pytest.raises(ValueError, match="algorithm.grpo.group_by"):
        compute_advantages(batch(**GRPO_ROWS), config("grpo", grpo={"group_by": "episode"}))


def test_at_grpo_groups_by_problem_agent_turn():
    rows = dict(
        team=[1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        local=[0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        local_mask=[1] * 6,
        uid=["p", "p", "p", "p", "q", "q"],
        role=["coder", "coder", "tester", "tester", "coder", "coder"],
        agent=["coder_0", "coder_0", "tester_0", "tester_0", "coder_0", "coder_0"],
        turn=[0, 0, 0, 0, 0, 0],
    )
    out = compute_advantages(batch(**rows), config("at_grpo"))
    # (p, coder_0, 0): [1, 2] ; (p, tester_0, 0): [0, 1] ; (q, coder_0, 0): [1, 0]: each ±1/√2 by its own std
    half = 0.5 / math.sqrt(0.5)
    expected = torch.tensor([-half, half, -half, half, half, -half])
    assert torch.allclose(out.batch["advantages"][:, 0], expected, atol=1e-4)


def test_at_grpo_separates_agents_of_one_role():
    rows = dict(
        team=[1.0, 0.0, 1.0, 1.0],
        local=[0.0] * 4,
        local_mask=[0] * 4,
        uid=["p"] * 4,
        role=["coder"] * 4,
        agent=["coder_0", "coder_0", "coder_1", "coder_1"],
        turn=[1, 1, 1, 1],
    )
    out = compute_advantages(batch(**rows), config("at_grpo"))
    half = 0.5 / math.sqrt(0.5)
    # coder_1's group has equal rewards: zero advantage, not mixed with coder_0's
    assert torch.allclose(out.batch["advantages"][:, 0], torch.tensor([half, -half, 0.0, 0.0]), atol=1e-4)


# a problem p whose turn 1 only one episode reached, and a problem q with one row: every reward 0.5
LONE_ROWS = dict(
    team=[0.5, 0.5, 0.5, 0.5],
    local=[0.0] * 4,
    local_mask=[1] * 4,
    uid=["p", "p", "p", "q"],
    role=["reasoner"] * 4,
    agent=["reasoner_0"] * 4,
    turn=[0, 0, 1, 0],
)


@pytest.mark.parametrize("group_by", ["problem", "problem_role", "problem_role_turn"])
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_group_of_one_gets_advantage_zero(group_by, norm):
    """docs/method.md (groups of one): a lone sample has nothing to be relative to; verl's convention gives it +0.5."""
    algorithm = {"grpo": {"group_by": group_by}, "norm_adv_by_std_in_grpo": norm}
    out = compute_advantages(batch(**LONE_ROWS), config("grpo", **algorithm))
    assert torch.equal(out.batch["advantages"], torch.zeros(4, 2))
    assert torch.equal(out.batch["returns"], torch.zeros(4, 2))


def test_grpo_group_of_one_next_to_real_groups():
    rows = dict(LONE_ROWS, team=[1.0, 0.0, 0.5, 0.5])
    out = compute_advantages(batch(**rows), config("grpo", grpo={"group_by": "problem_role_turn"}))
    half = 0.5 / math.sqrt(0.5)
    assert torch.allclose(out.batch["advantages"][:, 0], torch.tensor([half, -half, 0.0, 0.0]), atol=1e-4)


def test_at_grpo_group_of_one_gets_advantage_zero():
    out = compute_advantages(batch(**LONE_ROWS), config("at_grpo"))
    assert torch.equal(out.batch["advantages"], torch.zeros(4, 2))
