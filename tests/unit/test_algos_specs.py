"""Estimator specs, config validation that names the key, and registration in a fresh process."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from verl_masopd.algos import ESTIMATORS, actor_settings, validate_estimator_config


def config(estimator, domain="code", workflow="mas", sharing="role", actor=None, **extra):
    base = {
        "algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False},
        "workflow": {"name": workflow, "domain": domain, "policy_sharing": sharing},
        "rollout": {"tree_sampling": estimator == "at_grpo"},
        "teacher": {"model_path": "/models/teacher"},
        "actor_rollout_ref": {"actor": actor if actor is not None else {}},
    }
    return OmegaConf.merge(base, OmegaConf.create(extra))


@pytest.mark.parametrize("name", ["masopd", "opd", "grpo", "magrpo", "marft", "at_grpo"])
def test_paper_settings_validate_for_both_domains(name):
    for domain in ("code", "math"):
        cfg = config(name, domain=domain)
        for key, value in actor_settings(name).items():
            OmegaConf.update(cfg, f"actor_rollout_ref.actor.{key}", value)
        assert validate_estimator_config(cfg).name == name


def test_cure_serves_code_only():
    assert validate_estimator_config(config("cure", sharing="shared")).needs_reference
    with pytest.raises(ValueError, match="workflow.domain='math'"):
        validate_estimator_config(config("cure", domain="math", sharing="shared"))


def test_cure_needs_one_shared_policy_and_the_kl_loss():
    with pytest.raises(ValueError, match="workflow.policy_sharing='role'"):
        validate_estimator_config(config("cure"))
    with pytest.raises(ValueError, match="actor_rollout_ref.actor.use_kl_loss"):
        validate_estimator_config(config("cure", sharing="shared", actor={"use_kl_loss": False}))
    assert actor_settings("cure") == {
        "policy_loss.loss_mode": "vanilla",
        "loss_agg_mode": "token-mean",
        "use_kl_loss": True,
        "kl_loss_type": "low_var_kl",
    }


def test_masopd_without_teacher_path_names_the_key():
    cfg = config("masopd")
    cfg.teacher.model_path = None
    with pytest.raises(ValueError, match="teacher.model_path is required"):
        validate_estimator_config(cfg)


def test_masopd_needs_two_role_types_and_enough_contrast_roles():
    with pytest.raises(ValueError, match="workflow.name='sa'"):
        validate_estimator_config(config("masopd", workflow="sa"))
    with pytest.raises(ValueError, match="algorithm.masopd.num_contrast_roles=2"):
        validate_estimator_config(config("masopd", algorithm={"masopd": {"num_contrast_roles": 2}}))


def test_unknown_option_key_is_named():
    with pytest.raises(ValueError, match="algorithm.masopd.ras_cof"):
        validate_estimator_config(config("masopd", algorithm={"masopd": {"ras_cof": 0.5}}))
    with pytest.raises(ValueError, match="algorithm.reward.local_weigth"):
        validate_estimator_config(config("grpo", algorithm={"reward": {"local_weigth": 0.5}}))


def test_loss_contradicting_the_estimator_is_named():
    with pytest.raises(ValueError, match="actor_rollout_ref.actor.policy_loss.loss_mode='vanilla'"):
        validate_estimator_config(config("magrpo", actor={"policy_loss": {"loss_mode": "vanilla"}}))
    with pytest.raises(ValueError, match="algorithm.use_kl_in_reward"):
        validate_estimator_config(config("grpo", algorithm={"use_kl_in_reward": True}))


def test_tree_sampling_belongs_to_at_grpo():
    cfg = config("at_grpo")
    cfg.rollout.tree_sampling = False
    with pytest.raises(ValueError, match="rollout.tree_sampling must be true"):
        validate_estimator_config(cfg)
    cfg = config("grpo")
    cfg.rollout.tree_sampling = True
    with pytest.raises(ValueError, match="rollout.tree_sampling must be false"):
        validate_estimator_config(cfg)


def test_unknown_estimator_is_named():
    with pytest.raises(ValueError, match="algorithm.adv_estimator='ppo2'"):
        validate_estimator_config(config("ppo2"))


def test_specs_describe_each_method():
    assert ESTIMATORS["masopd"].needs_teacher and not ESTIMATORS["masopd"].needs_critic
    assert ESTIMATORS["marft"].needs_critic and ESTIMATORS["marft"].joint_batch
    assert ESTIMATORS["magrpo"].uses_local_reward is False and ESTIMATORS["magrpo"].policy_loss == "gpg"
    assert ESTIMATORS["cure"].policy_sharing == frozenset({"shared"})


def test_every_name_resolves_through_verl_after_import_verl_in_a_fresh_process():
    script = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn\n"
        "for name in ['masopd', 'opd', 'grpo', 'magrpo', 'marft', 'cure', 'at_grpo']:\n"
        "    print(name, get_adv_estimator_fn(name).__module__)\n"
        "print('marft-loss', get_policy_loss_fn('marft').__module__)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    modules = dict(line.split() for line in result.stdout.splitlines())
    assert modules == {
        "masopd": "verl_masopd.algos.masopd",
        "opd": "verl_masopd.algos.masopd",
        "grpo": "verl.trainer.ppo.core_algos",
        "magrpo": "verl_masopd.algos.magrpo",
        "marft": "verl_masopd.algos.marft",
        "cure": "verl_masopd.algos.cure",
        "at_grpo": "verl_masopd.algos.at_grpo",
        "marft-loss": "verl_masopd.algos.marft",
    }
