"""MultiAgent-OPD's role-selective supervision on a hand-made batch of the search team, with the
algorithm overrides of recipes/multiagent_opd.sh itself: the Searchers by OPD on their generated
tokens (the passages masked), the Leader by GRPO on the team's EM across the question's teams
(whatever turn each Leader reply was at), the Answerer by GRPO on its candidates' EM within the
team's hand-over; numbers by hand."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "multiagent_opd.sh"


def recipe_algorithm() -> dict:
    """The `algorithm` section the recipe's overrides write (keys with and without `++`)."""
    overrides = re.findall(r"(?<![\w.])\+*(algorithm\.[\w.]+)=(\S+)", RECIPE.read_text())
    section = OmegaConf.create()
    for key, value in overrides:
        OmegaConf.update(section, key, value, force_add=True)
    return OmegaConf.to_container(section)["algorithm"]


def objects(*values):
    return np.array(values, dtype=object)


# One question p, two teams. e0 plans one wave and hands over at turn 2; its Answerers' candidate 0
# is right (team EM 1). e1 plans two waves and hands over at turn 4; its candidate 0 is wrong (team
# EM 0), its candidate 1 right. Searcher rows: 4 positions, the passages (positions 1–2 of row 2)
# outside the response mask.
ROWS = [
    # role,     episode, turn, candidate EM (Answerers' role-local reward)
    ("leader", "e0", 0, None),
    ("leader", "e1", 0, None),
    ("searcher", "e0", 1, None),
    ("searcher", "e1", 1, None),
    ("leader", "e0", 2, None),
    ("leader", "e1", 2, None),
    ("searcher", "e1", 3, None),
    ("answerer", "e0", 3, 1.0),
    ("answerer", "e0", 3, 0.0),
    ("leader", "e1", 4, None),
    ("answerer", "e1", 5, 0.0),
    ("answerer", "e1", 5, 1.0),
]
TEAM = {"e0": 1.0, "e1": 0.0}
SEARCHER_TEACHER = {2: [-0.5, -9.0, -9.0, -1.0], 3: [-2.0, -1.0, 0.0, -0.5], 6: [-1.0, -1.0, -1.0, -1.0]}
SEARCHER_OLD = {2: [-1.0, 0.0, 0.0, -0.25], 3: [-1.0, -1.0, -0.5, -0.5], 6: [-0.5, -2.0, -1.0, -3.0]}


def team_batch() -> DataProto:
    n = len(ROWS)
    mask = torch.ones(n, 4)
    mask[2, 1:3] = 0.0  # the passages inside the first Searcher's reply
    teacher, old = torch.zeros(n, 4), torch.zeros(n, 4)
    for i in SEARCHER_TEACHER:
        teacher[i], old[i] = torch.tensor(SEARCHER_TEACHER[i]), torch.tensor(SEARCHER_OLD[i])
    role, episode, turn, local = zip(*ROWS)
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "old_log_probs": old,
            "rollout_log_probs": old.clone(),
            "teacher_log_probs": teacher,
            "team_reward": torch.tensor([TEAM[e] for e in episode]),
            "local_reward": torch.tensor([v or 0.0 for v in local]),
            "local_mask": torch.tensor([float(v is not None) for v in local]),
        },
        non_tensors={
            "uid": objects(*["p"] * n),
            "role": objects(*role),
            "agent": objects(*[f"{r}_{i}" for i, r in enumerate(role)]),
            "episode_id": objects(*episode),
            "turn": objects(*turn),
            "num_turns": objects(*[3 if e == "e0" else 5 for e in episode]),
        },
    )


def test_the_recipe_trains_the_searchers_by_opd_the_leader_and_the_answerer_by_grpo():
    algorithm = recipe_algorithm()
    assert algorithm["adv_estimator"] == "grpo"
    assert {role: entry["estimator"] for role, entry in algorithm["per_role"].items()} == {
        "searcher": "opd",
        "leader": "grpo",
        "answerer": "grpo",
    }
    out = compute_advantages(team_batch(), read_estimator(algorithm))
    a = out.batch["advantages"]
    mask = team_batch().batch["response_mask"]

    # Searchers: A_k = ℓT_k − ℓS_k on their generated tokens, 0 on the passages
    assert torch.equal(a[2], torch.tensor([0.5, 0.0, 0.0, -0.75]))
    assert torch.equal(a[3], torch.tensor([-1.0, 0.0, 0.5, 0.0]))
    assert torch.equal(a[6], torch.tensor([-0.5, 1.0, 0.0, 2.0]))

    # Leader: every Leader reply of a team gets its team's EM against the question's teams, turns
    # pooled: e0's 2 replies r = 1, e1's 3 replies r = 0; mean 0.4, std (n − 1) √0.3
    leader = [i for i, row in enumerate(ROWS) if row[0] == "leader"]
    r = torch.tensor([TEAM[ROWS[i][1]] for i in leader])
    expected = (r - 0.4) / (float(np.sqrt(0.3)) + 1e-6)
    assert torch.allclose(a[leader], expected.unsqueeze(-1) * mask[leader], atol=1e-6)
    assert a[9, 0].item() < 0  # e1's hand-over at turn 4, the only Leader reply at that turn, is not dropped

    # Answerer: GRPO within its team's candidates on r = team EM + candidate EM (the team's EM equal
    # across the group): e0 r = 2, 1 and e1 r = 0, 1 → ±1/√2
    half = 1 / np.sqrt(2) / (1 + 1e-6 * np.sqrt(2))
    for row, sign in ((7, 1), (8, -1), (10, -1), (11, 1)):
        assert a[row, 0].item() == pytest.approx(sign * half, abs=1e-6)
    assert bool(out.batch["trainable"].all())
