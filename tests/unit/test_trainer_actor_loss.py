"""No silent actor settings: verl's actor config reaches the loss, the rest is refused by name."""

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

from verl_masopd.config import compose_config
from verl_masopd.config.actor_loss import actor_loss, check_actor_settings
from verl_masopd.options.errors import ConfigError

ACTOR = "actor_rollout_ref.actor"


def config(tiny_model_path, *overrides):
    return compose_config(
        ["preset=cpu", f"students.path={tiny_model_path}", "algorithm.adv_estimator=grpo", *overrides]
    )


def test_every_loss_setting_reaches_the_loss_config(tiny_model_path):
    cfg = config(
        tiny_model_path,
        f"{ACTOR}.clip_ratio_low=0.1",
        f"{ACTOR}.clip_ratio_high=0.28",
        f"{ACTOR}.clip_ratio_c=2.5",
        f"{ACTOR}.entropy_coeff=0.01",
        f"{ACTOR}.loss_scale_factor=512",
        f"{ACTOR}.policy_loss.clip_cov_ratio=0.001",
    )
    loss = actor_loss(cfg).config
    assert (loss.clip_ratio_low, loss.clip_ratio_high, loss.clip_ratio_c) == (0.1, 0.28, 2.5)
    assert loss.entropy_coeff == 0.01 and loss.loss_scale_factor == 512
    assert loss.policy_loss.clip_cov_ratio == 0.001
    assert actor_loss(cfg).needs_entropy and not actor_loss(config(tiny_model_path)).needs_entropy


@pytest.mark.parametrize(
    "override, bound",
    [([], 1.2), ([f"{ACTOR}.clip_ratio_high=0.28"], 1.28)],
)
def test_clip_ratio_high_bounds_verls_policy_loss(tiny_model_path, override, bound):
    """The config verl's vanilla loss reads clips the ratio at 1 + clip_ratio_high (positive advantages)."""
    loss = actor_loss(config(tiny_model_path, *override)).config
    ratio = torch.tensor([[1.5]])
    pg_loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=torch.zeros(1, 1),
        log_prob=ratio.log(),
        advantages=torch.ones(1, 1),
        response_mask=torch.ones(1, 1),
        loss_agg_mode="token-mean",
        config=loss,
    )
    assert pg_loss.item() == pytest.approx(-bound)


@pytest.mark.parametrize(
    "override, named",
    [
        (f"{ACTOR}.ppo_epochs=2", f"{ACTOR}.ppo_epochs=2 is not supported"),
        (f"{ACTOR}.shuffle=true", f"{ACTOR}.shuffle=True is not supported"),
        (f"{ACTOR}.optim.clip_grad=0.5", f"{ACTOR}.optim.clip_grad=0.5 differs from {ACTOR}.grad_clip"),
        (f"{ACTOR}.optim.lr_warmup_steps=10", f"{ACTOR}.optim.lr_warmup_steps=10 is not used by the project"),
        (f"{ACTOR}.optim.betas=[0.9,0.95]", f"{ACTOR}.optim.betas="),
    ],
)
def test_ignored_settings_are_refused_by_name(tiny_model_path, override, named):
    with pytest.raises(ConfigError, match=named.replace("[", r"\[")):
        check_actor_settings(config(tiny_model_path, override), hybrid=False)


def test_defaults_pass_and_the_hybrid_workers_take_the_optimizer_section(tiny_model_path):
    check_actor_settings(config(tiny_model_path), hybrid=False)
    check_actor_settings(config(tiny_model_path, f"{ACTOR}.optim.lr_warmup_steps=10"), hybrid=True)


def test_an_actor_config_of_another_engine_is_a_config_error(tiny_model_path):
    with pytest.raises(ConfigError, match=f"{ACTOR}: Error in call to target"):
        actor_loss(config(tiny_model_path, f"{ACTOR}._target_=verl.workers.config.ActorConfig", f"{ACTOR}.strategy=x"))
