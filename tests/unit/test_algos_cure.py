"""CURE rewards from hand-built execution matrices, separate normalisation and dropped groups."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, cure, read_estimator
from verl_masopd.algos.cure import ExecutionMatrix, coder_rewards, normalise

# rows: programs of e0, e1 ; columns: 2 golden tests, then the tests of e0, e1
MIXED = np.array([[1, 1, 1, 0], [1, 0, 1, 1]])
NONE_CORRECT = np.array([[0, 1, 1, 0], [0, 0, 0, 1]])
ALL_CORRECT = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])


def test_coder_reward_is_golden_pass_rate():
    assert coder_rewards(MIXED, 2).tolist() == [1.0, 0.5]
    assert coder_rewards(NONE_CORRECT, 2).tolist() == [0.5, 0.0]


def test_tester_rewards_with_correct_and_wrong_programs():
    # C = {0}, W = {1}; test 0 accurate (program 0 passes) → 1 − B[1,2] = 0 ;
    # test 1 inaccurate (program 0 fails it) → −B[1,3] = −1
    assert cure.tester_rewards(MIXED, 2).tolist() == [0.0, -1.0]


def test_no_correct_program_gives_no_tester_data():
    assert cure.tester_rewards(NONE_CORRECT, 2) is None


def test_all_programs_correct_gives_plus_minus_one():
    assert cure.tester_rewards(ALL_CORRECT, 2).tolist() == [1.0, -1.0]


def test_tester_reward_is_the_share_of_wrong_programs_rejected():
    # 3 programs × (1 golden + 2 generated tests)
    b = np.array([[1, 1, 1], [0, 0, 1], [0, 1, 0]])
    # C = {0}, W = {1, 2}; test 0 accurate, rejected by program 1 of W → 1/2 ; test 1 accurate, rejected by 2 → 1/2
    assert cure.tester_rewards(b, 1).tolist() == [0.5, 0.5]
    # a test a correct program fails is inaccurate: −(share of wrong programs it accepts)
    b = np.array([[1, 0, 1], [0, 1, 1], [0, 1, 0]])
    assert cure.tester_rewards(b, 1).tolist() == [-1.0, 0.5]


def test_normalisation_and_zero_std_drop():
    assert normalise(np.array([1.0, 0.5])).tolist() == [1.0, -1.0]
    assert normalise(np.array([1.0, 1.0])) is None
    assert normalise(None) is None


def test_matrix_shape_is_checked():
    with pytest.raises(ValueError, match="expected"):
        ExecutionMatrix(("e0", "e1"), np.ones((2, 3)), num_golden=2)


def cure_batch(uids, episodes, roles, matrices):
    return DataProto.from_dict(
        tensors={"response_mask": torch.tensor([[1.0, 1.0, 0.0]] * len(roles))},
        non_tensors={
            "uid": np.array(uids, dtype=object),
            "episode_id": np.array(episodes, dtype=object),
            "role": np.array(roles, dtype=object),
        },
        meta_info={"cure_matrices": matrices},
    )


def test_compute_advantages_normalises_groups_separately_and_drops_empty_ones():
    matrices = {
        "p": ExecutionMatrix(("e0", "e1"), MIXED, 2),
        "q": ExecutionMatrix(("f0", "f1"), NONE_CORRECT, 2),
    }
    data = cure_batch(
        ["p", "p", "p", "p", "p", "q", "q"],
        ["e0", "e1", "e0", "e1", "e1", "f0", "f1"],
        ["coder", "coder", "tester", "tester", "coder", "coder", "tester"],
        matrices,
    )
    config = read_estimator({"adv_estimator": "cure"})
    out = compute_advantages(data, config)
    # p coder [1, 0.5] → [1, −1]; p tester [0, −1] → [1, −1]; e1's earlier-turn coder row → −1;
    # q coder [0.5, 0] → [1, −1]; q has no correct program → its tester row dropped
    assert out.batch["advantages"][:, 0].tolist() == [1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0]
    assert out.batch["trainable"].tolist() == [True] * 6 + [False]
    assert torch.equal(out.batch["advantages"][:, 2], torch.zeros(7))
    assert out.meta_info["advantage_metrics"]["cure/dropped_rows"] == 1


def test_missing_matrix_is_named():
    data = cure_batch(["p"], ["e0"], ["coder"], {})
    with pytest.raises(ValueError, match="uid 'p'"):
        compute_advantages(data, read_estimator({"adv_estimator": "cure"}))
