"""CURE rewards from hand-built execution matrices, separate normalisation and dropped groups;
the matrices of played episodes asked of the code workflow, in rollout group order."""

import numpy as np
import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, cure, read_estimator
from verl_masopd.algos.cure import coder_rewards, normalise, rollout_matrices
from verl_masopd.rollout.episode_rows import EpisodeRows
from verl_masopd.rollout.records import EpisodeResult, RolloutGroup
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.execution_matrix import ExecutionMatrix
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.problem import TestCase as Case

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
        ExecutionMatrix(np.ones((2, 3)), num_golden=2)


def cure_batch(roles, episodes, matrices):
    return DataProto.from_dict(
        tensors={"response_mask": torch.tensor([[1.0, 1.0, 0.0]] * len(roles))},
        non_tensors={"role": np.array(roles, dtype=object)},
        meta_info={"cure_matrices": matrices, "episode_rows": episodes},
    )


CURE = read_estimator({"adv_estimator": "cure"})


def test_compute_advantages_normalises_groups_separately_and_drops_empty_ones():
    # problem p: episode 0 rows 0 and 2, episode 1 rows 1, 3 and 4; problem q: one row per episode
    episodes = EpisodeRows((((0, 2), (1, 3, 4)), ((5,), (6,))))
    data = cure_batch(
        ["coder", "coder", "tester", "tester", "coder", "coder", "tester"],
        episodes,
        [ExecutionMatrix(MIXED, 2), ExecutionMatrix(NONE_CORRECT, 2)],
    )
    out = compute_advantages(data, CURE)
    # p coder [1, 0.5] → [1, −1]; p tester [0, −1] → [1, −1]; episode 1's earlier-turn coder row → −1;
    # q coder [0.5, 0] → [1, −1]; q has no correct program → its tester row dropped
    assert out.batch["advantages"][:, 0].tolist() == [1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0]
    assert out.batch["trainable"].tolist() == [True] * 6 + [False]
    assert torch.equal(out.batch["advantages"][:, 2], torch.zeros(7))
    assert out.meta_info["advantage_metrics"]["cure/dropped_rows"] == 1


def test_matrices_must_match_the_groups_and_their_episodes():
    with pytest.raises(ValueError, match="0 CURE execution matrices for 1 rollout groups"):
        compute_advantages(cure_batch(["coder"], EpisodeRows((((0,),),)), []), CURE)
    with pytest.raises(ValueError, match="rollout group 0 has 1 episodes, its execution matrix 2"):
        compute_advantages(cure_batch(["coder"], EpisodeRows((((0,),),)), [ExecutionMatrix(MIXED, 2)]), CURE)


RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
SUM = Problem(uid="sum", domain="code", statement="Print a + b.", tests=(Case("1 2\n", "3\n"),))
DOUBLE = Problem(uid="double", domain="code", statement="Print 2a.", tests=(Case("4\n", "8\n"),))


def played(workflow, problem, program):
    episode = workflow.reset(problem)
    texts = {"coder_0": f"```python\n{program}```", "tester_0": "```input\n2 3\n```\n```output\n5\n```"}
    workflow.step(episode, {a.name: workflow.parse(a, texts[a.name]) for a in workflow.agents})
    return EpisodeResult(f"{problem.uid}-{program[-3:]}", episode, [], workflow.judge(episode), 0)


def test_the_code_workflow_builds_each_groups_matrix_in_group_order():
    workflow = make_workflow("mas", "code", timeout=10.0)
    groups = [
        RolloutGroup(SUM, [played(workflow, SUM, RIGHT), played(workflow, SUM, WRONG)]),
        RolloutGroup(DOUBLE, [played(workflow, DOUBLE, "print(2 * int(input()))\n")]),
    ]
    [first, second] = rollout_matrices(groups, workflow)["cure_matrices"]
    # sum: the right program passes the golden test and both testers' 2 3 → 5; the wrong one neither
    assert first.passed.tolist() == [[1, 1, 1], [0, 0, 0]]
    # double: its program passes the golden test; "2 3" is no input for it, the test's column is 0
    assert (second.passed.tolist(), second.num_golden) == ([[1, 0]], 1)
