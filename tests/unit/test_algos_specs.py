"""Estimator specs, config validation that names the key, and registration in a fresh process."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_masopd.algos import ESTIMATORS, actor_settings
from verl_masopd.algos.marft import MarftOptions
from verl_masopd.algos.masopd import MasopdOptions
from verl_masopd.config.estimator import validate_estimator_config
from verl_masopd.options.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


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
    assert validate_estimator_config(config("cure", sharing="shared")).spec.needs_reference
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


def test_settings_carry_the_typed_options_read_once():
    settings = validate_estimator_config(config("masopd", algorithm={"masopd": {"ras_coef": 0.5}}))
    assert settings.options == MasopdOptions(ras_coef=0.5) and settings.num_contrast_roles == 1
    assert settings.actor_grad_clip(1.0) == 1.0
    marft = validate_estimator_config(config("marft", algorithm={"marft": {"max_grad_norm": 0.25}}))
    assert marft.options == MarftOptions(max_grad_norm=0.25) and marft.num_contrast_roles == 0
    assert marft.actor_grad_clip(1.0) == 0.25, "MARFT's option replaces the actor's gradient clip"
    # a section of another estimator is validated too, and the error is the one config error type
    with pytest.raises(ConfigError, match="algorithm.marft.lam: must be in"):
        validate_estimator_config(config("grpo", algorithm={"marft": {"lam": 2.0}}))


def test_cure_with_several_agents_per_role_is_rejected_naming_the_setting():
    cfg = config("cure", sharing="shared")
    cfg.workflow.agents_per_role = 2
    with pytest.raises(ValueError, match="workflow.agents_per_role=2 cannot be used with algorithm.adv_estimator=cure"):
        validate_estimator_config(cfg)
    cfg.workflow.agents_per_role = 1
    assert validate_estimator_config(cfg).name == "cure"


def test_estimation_and_trainer_hold_no_estimator_names():
    """Every estimator-specific need lives in its spec: no comparison against a name elsewhere."""
    names = "|".join(ESTIMATORS)
    pattern = re.compile(rf"[\"']({names})[\"']")
    files = [ROOT / "verl_masopd" / "algos" / "estimate.py", *(ROOT / "verl_masopd" / "trainer").glob("*.py")]
    found = [
        f"{f.name}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)
    ]
    assert found == []


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
