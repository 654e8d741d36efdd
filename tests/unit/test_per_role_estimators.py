"""Per-role estimators (`algorithm.per_role`): each role's advantages by its own estimator and
grouping, merged back in row order, with hand-computed numbers; the path without per-role
estimators unchanged bit for bit; the needs the trainer asks about; every start-up refusal
naming its key."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_masopd.algos import actor_settings, compute_advantages, read_estimator
from verl_masopd.config import compose_config
from verl_masopd.config.estimator import validate_estimator_config
from verl_masopd.config.validate import validate_config, verl_algo_config
from verl_masopd.options.errors import ConfigError
from verl_masopd.rollout.episode_rows import EpisodeRows


def objects(*values):
    return np.array(values, dtype=object)


# One problem p, two episodes: the coder (one agent) acts at turn 0 of each, three testers at
# turn 0 of both and at turn 1 of e0. Team rewards: e0 0, e1 1; every local mask on.
ROWS = [
    # role,    agent,      episode, turn, local
    ("tester", "tester_0", "e0", 0, 0.0),
    ("coder", "coder_0", "e0", 0, 0.0),
    ("tester", "tester_1", "e0", 0, 1.0),
    ("tester", "tester_2", "e0", 0, 2.0),
    ("tester", "tester_0", "e1", 0, 1.0),
    ("coder", "coder_0", "e1", 0, 0.0),
    ("tester", "tester_1", "e1", 0, 1.0),
    ("tester", "tester_2", "e1", 0, 1.0),
    ("tester", "tester_0", "e0", 1, 1.0),
    ("tester", "tester_1", "e0", 1, 0.5),
    ("tester", "tester_2", "e0", 1, 0.0),
]
TEAM = {"e0": 0.0, "e1": 1.0}
EPISODES = EpisodeRows((((0, 1, 2, 3, 8, 9, 10), (4, 5, 6, 7)),))
# the coder rows' ℓT and ℓS (old_log_probs); the coder's first response has two tokens
CODER_TEACHER = {1: [-0.5, -1.0, 0.0], 5: [-2.0, -1.0, -1.0]}
CODER_OLD = {1: [-1.0, -0.25, 0.0], 5: [-1.0, -1.0, -0.5]}


def two_role_batch() -> DataProto:
    rows = len(ROWS)
    mask = torch.ones(rows, 3)
    mask[1, 2] = 0.0
    teacher, old = torch.zeros(rows, 3), torch.zeros(rows, 3)
    for i in CODER_TEACHER:
        teacher[i], old[i] = torch.tensor(CODER_TEACHER[i]), torch.tensor(CODER_OLD[i])
    role, agent, episode, turn, local = zip(*ROWS)
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "old_log_probs": old,
            "rollout_log_probs": torch.zeros(rows, 3),
            "teacher_log_probs": teacher,
            "team_reward": torch.tensor([TEAM[e] for e in episode]),
            "local_reward": torch.tensor(local),
            "local_mask": torch.ones(rows),
        },
        non_tensors={
            "uid": objects(*["p"] * rows),
            "role": objects(*role),
            "agent": objects(*agent),
            "episode_id": objects(*episode),
            "turn": objects(*turn),
            "num_turns": objects(*[2 if e == "e0" else 1 for e in episode]),
        },
        meta_info={"episode_rows": EPISODES},
    )


def algorithm_config(**algorithm):
    return read_estimator({"adv_estimator": "grpo", **algorithm})


OPD_CODER_GRPO_TESTER = {"coder": {"estimator": "opd"}, "tester": {"estimator": "grpo", "group_by": "episode"}}


def test_opd_coder_and_grpo_tester_grouped_by_episode():
    out = compute_advantages(two_role_batch(), algorithm_config(per_role=OPD_CODER_GRPO_TESTER))
    expected = torch.zeros(len(ROWS), 3)
    # coder, opd: A_k = ℓT_k − ℓS_k on response tokens
    expected[1] = torch.tensor([0.5, -0.75, 0.0])
    expected[5] = torch.tensor([-1.0, 0.0, -0.5])
    # tester, grpo (group_by problem_role_turn) on uid | episode: r = team + local
    #   (e0, turn 0): r = 0, 1, 2: mean 1, std 1
    expected[[0, 2, 3]] = (torch.tensor([-1.0, 0.0, 1.0]) / (1.0 + 1e-6)).unsqueeze(-1).expand(3, 3)
    #   (e1, turn 0): r = 2, 2, 2: std 0, every advantage 0
    #   (e0, turn 1): r = 1, 0.5, 0: mean 0.5, std 0.5
    expected[[8, 9, 10]] = (torch.tensor([0.5, 0.0, -0.5]) / (0.5 + 1e-6)).unsqueeze(-1).expand(3, 3)
    assert torch.equal(out.batch["advantages"], expected)
    assert torch.equal(out.batch["returns"], expected)
    assert torch.equal(out.batch["trainable"], torch.ones(len(ROWS), dtype=torch.bool))
    metrics = out.meta_info["advantage_metrics"]
    # coder tokens: 0.5, −0.75, −1, 0, −0.5 → −0.35
    assert metrics["per_role/coder/opd/advantage_mean"] == pytest.approx(-0.35)
    assert metrics["per_role/tester/grpo/advantage_mean"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["advantage/coder/mean"] == pytest.approx(-0.35)
    assert metrics["advantage/coder/min"] == -1.0
    assert metrics["per_role/advantage_mean"] == pytest.approx(-1.75 / 32)


def test_a_frozen_role_leaves_the_loss_and_the_other_role_is_unchanged():
    frozen = {"coder": {"estimator": "frozen"}, "tester": OPD_CODER_GRPO_TESTER["tester"]}
    out = compute_advantages(two_role_batch(), algorithm_config(per_role=frozen))
    both = compute_advantages(two_role_batch(), algorithm_config(per_role=OPD_CODER_GRPO_TESTER))
    coder = [i for i, row in enumerate(ROWS) if row[0] == "coder"]
    tester = [i for i in range(len(ROWS)) if i not in coder]
    assert out.batch["trainable"].tolist() == [i not in coder for i in range(len(ROWS))]
    assert torch.equal(out.batch["advantages"][coder], torch.zeros(2, 3))
    assert torch.equal(out.batch["advantages"][tester], both.batch["advantages"][tester])
    assert "per_role/coder/frozen/advantage_mean" in out.meta_info["advantage_metrics"]


def test_grouping_by_problem_mixes_the_episodes():
    per_role = dict(OPD_CODER_GRPO_TESTER, tester={"estimator": "grpo"})
    out = compute_advantages(two_role_batch(), algorithm_config(per_role=per_role))
    # (p, turn 0) holds both episodes' testers: r = 0, 1, 2, 2, 2, 2, mean 1.5, std √0.7
    r = torch.tensor([0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    expected = (r - r.mean()) / (r.std() + 1e-6)
    assert torch.allclose(out.batch["advantages"][[0, 2, 3, 4, 6, 7], 0], expected)
    assert out.batch["advantages"][4, 0] == pytest.approx(0.5 / 0.7**0.5, abs=1e-5)


def test_grouping_by_episode_spans_turns_with_grpo_grouped_by_problem_role():
    out = compute_advantages(
        two_role_batch(), algorithm_config(per_role=OPD_CODER_GRPO_TESTER, grpo={"group_by": "problem_role"})
    )
    # e0's six tester rows: r = 0, 1, 2, 1, 0.5, 0, mean 0.75; e1's three: 2, 2, 2 → 0
    r = torch.tensor([0.0, 1.0, 2.0, 1.0, 0.5, 0.0])
    expected = (r - 0.75) / (r.std() + 1e-6)
    assert torch.allclose(out.batch["advantages"][[0, 2, 3, 8, 9, 10], 0], expected)
    assert torch.equal(out.batch["advantages"][[4, 6, 7]], torch.zeros(3, 3))


def test_grouping_by_turn_splits_an_episode_into_its_turns():
    per_role = dict(OPD_CODER_GRPO_TESTER, tester={"estimator": "grpo", "group_by": "turn"})
    by_turn = compute_advantages(
        two_role_batch(), algorithm_config(per_role=per_role, grpo={"group_by": "problem_role"})
    )
    by_episode = compute_advantages(two_role_batch(), algorithm_config(per_role=OPD_CODER_GRPO_TESTER))
    assert torch.equal(by_turn.batch["advantages"], by_episode.batch["advantages"])


def test_magrpo_on_one_role_reads_that_roles_rows_of_each_episode():
    out = compute_advantages(two_role_batch(), algorithm_config(per_role={"tester": {"estimator": "magrpo"}}))
    # testers, team only (r_e0 = 0, r_e1 = 1), γ = 1: turn 0 alive e0 and e1, mean 0.5; turn 1 e0 alone
    tester = [0, 2, 3, 4, 6, 7, 8, 9, 10]
    assert out.batch["advantages"][tester, 0].tolist() == [-0.5, -0.5, -0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0]
    assert out.meta_info["episode_rows"] is EPISODES
    assert EPISODES.select(np.array(tester)) == EpisodeRows((((0, 1, 2, 6, 7, 8), (3, 4, 5)),))


def test_a_role_not_listed_takes_adv_estimator():
    out = compute_advantages(two_role_batch(), algorithm_config(per_role={"coder": {"estimator": "opd"}}))
    # tester: grpo on (p, tester, turn): turn 0 pools both episodes (see above); turn 1 as by episode
    assert out.batch["advantages"][4, 0] == pytest.approx(0.5 / 0.7**0.5, abs=1e-5)
    assert torch.equal(out.batch["advantages"][1], torch.tensor([0.5, -0.75, 0.0]))
    assert "per_role/tester/grpo/advantage_mean" in out.meta_info["advantage_metrics"]


def _same_result(a: DataProto, b: DataProto) -> bool:
    return all(torch.equal(a.batch[k], b.batch[k]) for k in ("advantages", "returns", "trainable"))


@pytest.mark.parametrize("estimator", ["grpo", "magrpo", "opd"])
def test_empty_per_role_is_the_path_without_it(estimator):
    without = compute_advantages(two_role_batch(), read_estimator({"adv_estimator": estimator}))
    empty = compute_advantages(two_role_batch(), read_estimator({"adv_estimator": estimator, "per_role": {}}))
    assert _same_result(without, empty)
    assert without.meta_info["advantage_metrics"] == empty.meta_info["advantage_metrics"]
    assert f"{estimator}/advantage_mean" in empty.meta_info["advantage_metrics"]


def test_every_role_on_the_default_estimator_by_problem_equals_one_estimator():
    """GRPO's problem_role_turn groups never mix roles, so running each role alone changes nothing."""
    one = compute_advantages(two_role_batch(), algorithm_config())
    per_role = {role: {"estimator": "grpo", "group_by": "problem"} for role in ("coder", "tester")}
    split = compute_advantages(two_role_batch(), algorithm_config(per_role=per_role))
    assert _same_result(one, split)
    metrics = split.meta_info["advantage_metrics"]
    for key, value in one.meta_info["advantage_metrics"].items():
        if key.startswith("advantage/"):
            assert metrics[key] == value


ROLES = ("coder", "tester")


def test_needs_are_those_of_the_estimators_in_play():
    grpo_everywhere = read_estimator(
        {"adv_estimator": "masopd", "per_role": {role: {"estimator": "grpo"} for role in ROLES}}, ROLES
    )
    assert [s.name for s in grpo_everywhere.estimators] == ["grpo", "grpo"]
    assert (grpo_everywhere.needs_teacher, grpo_everywhere.num_contrast_roles) == (False, 0)
    # the workflow's roles unknown: the default counts as in play
    unknown_roles = read_estimator({"adv_estimator": "masopd", "per_role": {"coder": {"estimator": "grpo"}}})
    assert (unknown_roles.needs_teacher, unknown_roles.num_contrast_roles) == (True, 1)
    masopd_coder = read_estimator(
        {"adv_estimator": "grpo", "per_role": {"coder": {"estimator": "masopd"}}, "masopd": {"num_contrast_roles": 2}},
        ROLES,
    )
    assert [s.name for s in masopd_coder.estimators] == ["masopd", "grpo"]
    assert (masopd_coder.needs_teacher, masopd_coder.num_contrast_roles, masopd_coder.needs_critic) == (True, 2, False)
    assert masopd_coder.role_estimator("tester").group_by == "problem"
    assert masopd_coder.role_estimator("tester").settings.name == "grpo"


def test_marft_as_the_default_of_no_role_is_not_in_play():
    settings = read_estimator(
        {"adv_estimator": "marft", "per_role": {role: {"estimator": "opd"} for role in ROLES}}, ROLES
    )
    assert (settings.needs_critic, settings.needs_reference, settings.needs_teacher) == (False, False, True)
    assert settings.actor_grad_clip(1.0) == 1.0
    alone = read_estimator({"adv_estimator": "marft"})
    assert (alone.needs_critic, alone.actor_grad_clip(1.0)) == (True, 0.5)


def config(estimator="grpo", per_role=None, sharing="role", name="mas", **extra):
    base = {
        "algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "per_role": per_role or {}},
        "workflow": {"name": name, "domain": "code", "policy_sharing": sharing, "agents_per_role": 1, "horizon": 4},
        "rollout": {"tree_sampling": False, "group_size": 4},
        "teacher": {"model_path": "/models/teacher"},
        "actor_rollout_ref": {"actor": {}},
    }
    return OmegaConf.merge(base, OmegaConf.create(extra))


def refusal(cfg) -> str:
    with pytest.raises(ValueError) as info:
        validate_estimator_config(cfg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_valid_per_role_config_reads_into_the_settings():
    settings = validate_estimator_config(config(per_role=OPD_CODER_GRPO_TESTER, workflow={"agents_per_role": 3}))
    assert settings.roles == ROLES
    assert {role: (e.settings.name, e.group_by, e.key) for role, e in settings.per_role.items()} == {
        "coder": ("opd", "problem", "algorithm.per_role.coder.estimator"),
        "tester": ("grpo", "episode", "algorithm.per_role.tester.estimator"),
    }
    assert (settings.needs_teacher, settings.num_contrast_roles) == (True, 0)


@pytest.mark.parametrize(
    "per_role, named",
    [
        ({"searcher": {"estimator": "opd"}}, "algorithm.per_role.searcher: workflow.name=mas (code) has no role"),
        ({"coder": {"estimator": "ppo"}}, "algorithm.per_role.coder.estimator='ppo' is not one of"),
        ({"coder": {"estimator": "grpo", "group_by": "agent"}}, "algorithm.per_role.coder.group_by: must be one of"),
        ({"coder": {"estimator": "grpo", "weight": 2}}, "unknown key algorithm.per_role.coder.weight"),
        ({"coder": {"group_by": "episode"}}, "algorithm.per_role.coder.estimator: a value is required"),
        ({"coder": "opd"}, "algorithm.per_role.coder: must be a mapping"),
        (["coder"], "algorithm.per_role: must map role names"),
    ],
)
def test_unknown_roles_estimators_groupings_and_keys_are_named(per_role, named):
    assert named in refusal(config(per_role=per_role))


def test_a_teacher_estimator_without_a_teacher_names_both_keys():
    message = refusal(config(per_role={"tester": {"estimator": "opd"}}, teacher={"model_path": None}))
    assert message == "teacher.model_path is required by algorithm.per_role.tester.estimator=opd"


def test_a_reward_estimator_for_a_role_without_reward_is_refused():
    no_reward = {"reward": {"team_weight": 0.0, "local_weight": 0.0}}
    message = refusal(config(per_role={"tester": {"estimator": "grpo"}}, algorithm=no_reward))
    assert message.startswith("algorithm.per_role.tester.estimator=grpo trains on a reward, but role tester gets none")
    assert "algorithm.reward.team_weight=0 and algorithm.reward.local_weight=0" in message
    # magrpo drops the local term: the team weight alone decides
    team_only = {"reward": {"team_weight": 0.0}}
    magrpo = refusal(config("magrpo", per_role={"tester": {"estimator": "magrpo"}}, algorithm=team_only))
    assert magrpo.endswith("role tester gets none: algorithm.reward.team_weight=0")
    assert validate_estimator_config(config(per_role={"tester": {"estimator": "grpo"}}, algorithm=team_only))


@pytest.mark.parametrize(
    "entry, extra, named",
    [
        ({"estimator": "grpo"}, {"rollout": {"group_size": 1}}, "and rollout.group_size give 1"),
        ({"estimator": "magrpo"}, {"rollout": {"group_size": 1}}, "and rollout.group_size give 1"),
        ({"estimator": "magrpo", "group_by": "episode"}, {}, "each group holds one episode"),
        ({"estimator": "magrpo", "group_by": "turn"}, {}, "each group holds one episode"),
        ({"estimator": "grpo", "group_by": "turn"}, {}, "and workflow.agents_per_role give 1"),
        (
            {"estimator": "grpo", "group_by": "episode"},
            {"workflow": {"horizon": 1}},
            "and workflow.agents_per_role and workflow.horizon give 1",
        ),
    ],
)
def test_a_group_baseline_without_groups_is_refused(entry, extra, named):
    message = refusal(config(per_role={"tester": entry}, **extra))
    assert message.startswith(f"algorithm.per_role.tester.group_by={entry.get('group_by', 'problem')} with ")
    assert named in message


def test_groups_of_two_or_more_are_accepted():
    for entry, workflow in (
        ({"estimator": "grpo", "group_by": "turn"}, {"agents_per_role": 2}),
        ({"estimator": "grpo", "group_by": "episode"}, {"horizon": 2}),
        ({"estimator": "opd", "group_by": "turn"}, {}),
    ):
        assert validate_estimator_config(config(per_role={"tester": entry}, workflow=workflow)).per_role


@pytest.mark.parametrize(
    "estimator, extra, reason",
    [
        ("marft", {}, "it trains a critic"),
        ("at_grpo", {"rollout": {"tree_sampling": True}}, "it needs tree sampling"),
        ("cure", {"workflow": {"policy_sharing": "shared"}}, "it needs a reference policy"),
    ],
)
def test_estimators_that_cannot_run_per_role_are_refused(estimator, extra, reason):
    message = refusal(config(per_role={"tester": {"estimator": estimator}}, **extra))
    assert (
        message == f"algorithm.per_role.tester.estimator={estimator} cannot run on role tester's rows alone: {reason}"
    )


def test_a_default_that_cannot_run_per_role_is_refused_for_the_roles_not_listed():
    message = refusal(config("marft", per_role={"coder": {"estimator": "opd"}}))
    assert message == "algorithm.adv_estimator=marft cannot run on role tester's rows alone: it trains a critic"
    # listed for every role, the default runs nowhere
    assert validate_estimator_config(config("marft", per_role={role: {"estimator": "opd"} for role in ROLES}))


def test_roles_of_one_shared_policy_need_one_actor_loss():
    message = refusal(config(per_role={"coder": {"estimator": "magrpo"}}, sharing="shared"))
    assert message.startswith(
        "algorithm.per_role.coder.estimator=magrpo (role coder) and algorithm.adv_estimator=grpo (role tester) "
        "train one policy (workflow.policy_sharing=shared) with different actor losses"
    )
    assert actor_settings("opd") == actor_settings("grpo")
    assert validate_estimator_config(config(per_role={"coder": {"estimator": "opd"}}, sharing="shared"))


def test_each_roles_estimator_meets_the_estimator_checks():
    # magrpo's gpg loss against the actor loss set for grpo
    actor = {"actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "vanilla"}}}}
    assert "contradicts algorithm.per_role.coder.estimator=magrpo, which needs 'gpg'" in refusal(
        config(per_role={"coder": {"estimator": "magrpo"}}, **actor)
    )
    # masopd serves multi-agent workflows only, with κ below the number of roles
    sa = refusal(config(per_role={"coder": {"estimator": "masopd"}}, name="sa"))
    assert sa.startswith("workflow.name='sa' (kind 'sa') cannot be used with algorithm.per_role.coder.estimator=masopd")
    kappa = {"algorithm": {"masopd": {"num_contrast_roles": 2}}}
    assert "algorithm.masopd.num_contrast_roles=2 exceeds" in refusal(
        config(per_role={"coder": {"estimator": "masopd"}}, **kappa)
    )
    assert "algorithm.per_role needs workflow.name and workflow.domain" in refusal(
        OmegaConf.create({"algorithm": {"adv_estimator": "grpo", "per_role": {"coder": {"estimator": "opd"}}}})
    )


@pytest.fixture(scope="module")
def paper_cfg():
    return compose_config(
        ["students.path=/models/student", "data.train_files=[/data/train.parquet]", "algorithm.adv_estimator=grpo"]
    )


def test_the_trainer_config_has_no_per_role_estimators_by_default(paper_cfg):
    assert OmegaConf.to_container(paper_cfg.algorithm.per_role) == {}
    assert validate_estimator_config(paper_cfg).per_role == {}


def test_the_trainer_config_takes_per_role_estimators():
    cfg = compose_config(
        [
            "students.path=/models/student",
            "data.train_files=[/data/train.parquet]",
            "algorithm.adv_estimator=grpo",
            "+algorithm.per_role.coder.estimator=opd",
        ]
    )
    assert verl_algo_config(cfg).adv_estimator == "grpo"
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert str(info.value) == "teacher.model_path is required by algorithm.per_role.coder.estimator=opd"
