"""judge_grpo (algos/judge_grpo.py): GRPO on the judge's scores of a hand-made batch of the search
team, per role beside the Leader's GRPO on the team's EM, with hand-computed numbers; rows without
a score and roles the workflow does not judge are refused, named."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator
from verl_masopd.config.estimator import validate_estimator_config


def objects(*values):
    return np.array(values, dtype=object)


# problem p, two teams: the Leader at turn 0 of each, Searchers at turn 1 (two in e0, one in e1)
ROWS = [
    # role,     episode, turn, judge score
    ("leader", "e0", 0, None),
    ("searcher", "e0", 1, 0.9),
    ("searcher", "e0", 1, 0.1),
    ("leader", "e1", 0, None),
    ("searcher", "e1", 1, 0.5),
]
TEAM = {"e0": 1.0, "e1": 0.0}


def batch(rows=ROWS) -> DataProto:
    role, episode, turn, score = zip(*rows)
    n = len(rows)
    mask = torch.ones(n, 3)
    mask[1, 2] = 0.0
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "team_reward": torch.tensor([TEAM[e] for e in episode]),
            "local_reward": torch.zeros(n),
            "local_mask": torch.zeros(n),
            "judge_score": torch.tensor([s or 0.0 for s in score]),
        },
        non_tensors={
            "uid": objects(*["p"] * n),
            "role": objects(*role),
            "episode_id": objects(*episode),
            "turn": objects(*turn),
            "judged": objects(*[s is not None for s in score]),
        },
    )


def config(**algorithm):
    return OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "grpo", "grpo": {"group_by": "problem_role_turn"}, **algorithm},
            "workflow": {"name": "search", "domain": "qa", "policy_sharing": "shared", "horizon": 8},
            "teacher": {"model_path": "/models/teacher"},
            "rollout": {"group_size": 2},
        }
    )


PROMPTED_CRITIC = {"searcher": {"estimator": "judge_grpo"}, "leader": {"estimator": "grpo"}}


def test_searchers_by_the_judges_score_and_the_leader_by_the_teams_em():
    cfg = config(per_role=PROMPTED_CRITIC)
    settings = validate_estimator_config(cfg)
    assert settings.needs_judge and not settings.needs_teacher
    out = compute_advantages(batch(), settings)
    a = out.batch["advantages"]
    # Searchers of (p, searcher, turn 1): scores 0.9, 0.1, 0.5; mean 0.5, std (n − 1) 0.4
    std = float(np.std([0.9, 0.1, 0.5], ddof=1))
    assert std == pytest.approx(0.4)
    for row, score in ((1, 0.9), (2, 0.1), (4, 0.5)):
        expected = (score - 0.5) / (std + 1e-6)
        assert a[row, 0].item() == pytest.approx(expected, abs=1e-5)
    assert a[1, 2].item() == 0.0  # a padded position
    # the Leaders by GRPO on the team's EM: 1 and 0 → ±0.7071
    assert a[0, 0].item() == pytest.approx(1 / np.sqrt(2) / (1 + 1e-6 * np.sqrt(2)), abs=1e-5)
    assert a[3, 0].item() == pytest.approx(-a[0, 0].item())
    assert bool(out.batch["trainable"].all())


def test_a_lone_searcher_gets_no_advantage():
    rows = [("searcher", "e0", 1, 0.9), ("searcher", "e1", 3, 0.2)]
    out = compute_advantages(batch(rows), read_estimator(config(adv_estimator="judge_grpo").algorithm))
    assert out.batch["advantages"].abs().sum().item() == 0.0


def test_rows_without_a_score_are_refused():
    with pytest.raises(ValueError, match="judge_grpo needs a judge's score on every row"):
        compute_advantages(batch(), read_estimator(config(adv_estimator="judge_grpo").algorithm))


def test_roles_the_workflow_does_not_judge_are_refused_at_start():
    with pytest.raises(
        ValueError, match=r"algorithm.adv_estimator=judge_grpo: workflow.name=search puts no reply of role 'leader'"
    ):
        validate_estimator_config(config(adv_estimator="judge_grpo"))
    key = "algorithm.per_role.answerer.estimator=judge_grpo"
    with pytest.raises(ValueError, match=f"{key}: .* no reply of role 'answerer'"):
        validate_estimator_config(config(per_role={**PROMPTED_CRITIC, "answerer": {"estimator": "judge_grpo"}}))
    cfg = config(per_role=PROMPTED_CRITIC)
    cfg.teacher.model_path = None
    with pytest.raises(
        ValueError, match="teacher.model_path is required by algorithm.per_role.searcher.estimator=judge_grpo"
    ):
        validate_estimator_config(cfg)
    math_cfg = config(adv_estimator="judge_grpo")
    math_cfg.workflow = {"name": "mas", "domain": "math"}
    with pytest.raises(ValueError, match="judges none"):
        validate_estimator_config(math_cfg)
