"""CURE: Coder and Tester rewards from the execution matrix, normalised in separate groups
(docs/method.md, "RL baselines"). Code domain only; one shared policy plays both roles.

Per problem, B ∈ {0,1}^{n×(t+m)}: row j is the program of the problem's j-th episode, the first
t columns the golden tests, column t+k the test the k-th episode's Tester wrote; B[j,l] = 1 when
program j's output on test l's input equals its expected output.

    Coder:   r_j = (1/t) Σ_{l<t} B[j,l]
    Tester:  C = {j : B[j,l] = 1 for all l < t} (correct programs), W = the others.
             C = ∅            → no tester data for this problem
             test k accurate  ⇔ B[j,t+k] = 1 for every j ∈ C
             W = ∅            → R_k = +1 if accurate else −1
             accurate         → R_k = mean_{j∈W} (1 − B[j,t+k])   (share of wrong programs rejected)
             inaccurate       → R_k = −mean_{j∈W} B[j,t+k]
    Â = (x − mean(x)) / std(x) within the problem's Coder group and, separately, its Tester group
        (population std). A group with zero std, or no tester data, is dropped: its rows get
        Â = 0 and are removed from the loss (batch["trainable"] false), as CURE removes them.

The estimation's steps (specs.py): `rollout_matrices` asks the workflow that played the step's
rollout groups for each group's matrix (it runs the programs: `CodeWorkflow.execution_matrix`,
workflows/execution_matrix.py), into meta_info["cure_matrices"] in group order; `prepare_cure`
computes Â and the kept rows once from them and the batch's episodes (rollout/episode_rows.py:
matrix row j is the group's episode j), the registered estimator broadcasts Â to the tokens,
`finish_cure` hands the kept rows on.

The episode's final program and final test (its last turn) fill the matrix; the reward of
episode j's program (test) is given to every turn's Coder (Tester) response of episode j, as the
team signal is broadcast to every turn. Loss: verl's clipped objective (clip 0.2, token-mean)
plus the actor's KL loss to the reference, use_kl_loss=true, kl_loss_type=low_var_kl (k3),
kl_loss_coef 0.01.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import register_adv_est

from verl_masopd.algos.steps import Finished, batch_field
from verl_masopd.rollout.episode_rows import EpisodeRows, episode_rows
from verl_masopd.workflows.execution_matrix import ExecutionMatrix

if TYPE_CHECKING:
    from verl_masopd.rollout.records import RolloutGroup

CODER, TESTER = "coder", "tester"


def coder_rewards(passed: np.ndarray, num_golden: int) -> np.ndarray:
    """r_j = golden pass rate of program j."""
    return passed[:, :num_golden].mean(axis=1)


def tester_rewards(passed: np.ndarray, num_golden: int) -> np.ndarray | None:
    """R_k for every generated test k, or None when no program is correct (C = ∅)."""
    correct = passed[:, :num_golden].all(axis=1)
    if not correct.any():
        return None
    generated = passed[:, num_golden:]
    accurate = generated[correct].all(axis=0)
    wrong = generated[~correct]
    if len(wrong) == 0:
        return np.where(accurate, 1.0, -1.0)
    return np.where(accurate, (1 - wrong).mean(axis=0), -wrong.mean(axis=0))


def normalise(rewards: np.ndarray | None) -> np.ndarray | None:
    """(x − mean x) / std x, or None (dropped) when there is no data or the std is 0."""
    if rewards is None or rewards.std() == 0:
        return None
    return (rewards - rewards.mean()) / rewards.std()


def rollout_matrices(groups: Sequence[RolloutGroup], workflow) -> dict[str, list[ExecutionMatrix]]:
    """meta_info["cure_matrices"]: each rollout group's execution matrix, in group order, built by
    `workflow`, the code workflow that played them."""
    return {"cure_matrices": [workflow.execution_matrix([r.episode for r in group.episodes]) for group in groups]}


def cure_row_advantages(
    role: np.ndarray, episodes: EpisodeRows, matrices: list[ExecutionMatrix]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row Â [B] and whether the row is kept [B] (False: its group was dropped); row i of
    episode j of group g reads matrix g's Coder or Tester reward j."""
    if len(matrices) != len(episodes.groups):
        raise ValueError(f"{len(matrices)} CURE execution matrices for {len(episodes.groups)} rollout groups")
    advantages = torch.zeros(len(role))
    kept = torch.zeros(len(role), dtype=torch.bool)
    for g, (group, matrix) in enumerate(zip(episodes.groups, matrices)):
        if len(matrix.passed) != len(group):
            raise ValueError(f"rollout group {g} has {len(group)} episodes, its execution matrix {len(matrix.passed)}")
        coder = normalise(coder_rewards(matrix.passed, matrix.num_golden))
        tester = normalise(tester_rewards(matrix.passed, matrix.num_golden))
        for j, rows in enumerate(group):
            for i in rows:
                if role[i] not in (CODER, TESTER):
                    raise ValueError(f"CURE serves the roles coder and tester, got role {role[i]!r}")
                rewards = coder if role[i] == CODER else tester
                if rewards is not None:
                    advantages[i] = float(rewards[j])
                    kept[i] = True
    return advantages, kept


def prepare_cure(data: DataProto, estimator) -> dict:
    """Â per row [B] and the kept rows [B] from meta_info["cure_matrices"], computed once."""
    if "cure_matrices" not in data.meta_info:
        raise ValueError("algorithm.adv_estimator=cure needs meta_info['cure_matrices'] (one matrix per rollout group)")
    advantages, kept = cure_row_advantages(
        batch_field(data, "role", "cure"), episode_rows(data, "cure"), data.meta_info["cure_matrices"]
    )
    return {"cure_advantages": advantages, "cure_kept": kept}


@register_adv_est("cure")
def compute_cure_advantage(
    token_level_rewards: torch.Tensor | None,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    *,
    cure_advantages: torch.Tensor,
    **unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Â [B] (`prepare_cure`) broadcast to each row's response tokens (rewards come from the matrices)."""
    token_advantages = cure_advantages.to(response_mask.device).unsqueeze(-1) * response_mask.float()
    return token_advantages, token_advantages


def finish_cure(advantages: torch.Tensor, returns: torch.Tensor, inputs: dict) -> Finished:
    """The dropped groups' rows leave the loss."""
    kept = inputs["cure_kept"]
    return Finished(advantages, returns, kept, {"cure/dropped_rows": int((~kept).sum())})
