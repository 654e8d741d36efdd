"""The policy loss from verl's own actor config, and the start-up refusal of actor settings the
trainer does not use.

Every loss setting under `actor_rollout_ref.actor` (clip_ratio, clip_ratio_low/high, clip_ratio_c,
tau_pos/neg, loss_agg_mode, loss_scale_factor, entropy_coeff, calculate_entropy, policy_loss.*,
use_kl_loss, kl_loss_coef, kl_loss_type) reaches verl's `ppo_loss` through verl's
`FSDPActorConfig`, converted from the section as verl's trainer does. The update itself is the
trainer's (one pass, contiguous mini-batches, engine/policy.py) and the project's engine (every
policy but the hybrid ones of full fine-tuning on vllm) takes only lr, weight_decay and grad_clip
of the optimizer (engine/policy_engine.py); a setting of those parts that differs from what runs is
refused by name (`check_actor_settings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig
from verl.workers.utils.losses import ppo_loss

from verl_masopd.options.errors import ConfigError

ACTOR = "actor_rollout_ref.actor"
# the update runs one pass over the step's rows, in order
UPDATE_RUNS_WITH = {"ppo_epochs": 1, "shuffle": False}
# the optimizer keys the hf path's engine takes from the config (grad_clip is the actor's)
OPTIM_TAKEN = frozenset({"_target_", "lr", "weight_decay", "total_training_steps", "clip_grad"})


@dataclass(frozen=True)
class ActorLoss:
    """verl's `ppo_loss` with the run's actor config; picklable, so Ray workers accept it."""

    config: FSDPActorConfig

    @property
    def needs_entropy(self) -> bool:
        """The model must return token entropies: entropy_coeff ≠ 0 puts −entropy_coeff · H in the loss."""
        return bool(self.config.calculate_entropy or self.config.entropy_coeff != 0)

    def __call__(self, model_output, data, dp_group=None):
        return ppo_loss(self.config, model_output, data, dp_group)


def actor_loss(cfg: DictConfig) -> ActorLoss:
    """The loss of `actor_rollout_ref.actor` (verl's `FSDPActorConfig`); a bad value is a ConfigError."""
    try:
        config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    except (InstantiationException, OmegaConfBaseException, ValueError, TypeError) as e:
        raise ConfigError(f"{ACTOR}: {str(e).splitlines()[0]}") from None
    if not isinstance(config, FSDPActorConfig):
        raise ConfigError(f"{ACTOR}._target_: must build verl's FSDPActorConfig, got {type(config).__name__}")
    return ActorLoss(config)


def _check_number(key: str, value, minimum: float, strict: bool) -> None:
    """A finite number above `minimum` (strict) or at least `minimum`."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > minimum if strict else value >= minimum)
    if not ok:
        raise ConfigError(f"{key}: must be a finite number {'>' if strict else '>='} {minimum}, got {value!r}")


def _same(a, b) -> bool:
    def plain(value):
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        return tuple(value) if isinstance(value, list | tuple) else (None if value == 0 else value)

    return plain(a) == plain(b)


def check_actor_settings(cfg: DictConfig, hybrid: bool) -> None:
    """Refuse, by name, an actor setting that would be ignored (module doc); hybrid: the policies
    are verl's hybrid workers (vllm, full fine-tuning), whose optimizer reads verl's whole section."""
    actor = cfg.actor_rollout_ref.actor
    for key, runs_with in UPDATE_RUNS_WITH.items():
        if not _same(actor.get(key), runs_with):
            raise ConfigError(
                f"{ACTOR}.{key}={actor.get(key)!r} is not supported: the update runs with {key}={runs_with!r}"
            )
    optim = actor.optim
    for key, value, minimum in (("optim.lr", optim.lr, 0), ("optim.weight_decay", optim.weight_decay, 0)):
        _check_number(f"{ACTOR}.{key}", value, minimum, strict=key == "optim.lr")
    _check_number(f"{ACTOR}.grad_clip", actor.grad_clip, 0, strict=True)
    if "clip_grad" in optim and not _same(optim.clip_grad, actor.grad_clip):
        raise ConfigError(
            f"{ACTOR}.optim.clip_grad={optim.clip_grad!r} differs from {ACTOR}.grad_clip={actor.grad_clip!r}, "
            f"which is the clip that runs; set {ACTOR}.grad_clip"
        )
    if hybrid:
        return
    defaults = {f.name: f.default for f in fields(FSDPOptimizerConfig)}
    for key in optim:
        if key not in OPTIM_TAKEN and key in defaults and not _same(optim[key], defaults[key]):
            raise ConfigError(
                f"{ACTOR}.optim.{key}={optim[key]!r} is not used by the project's engine (the hf generation "
                f"path; LoRA on vllm), whose optimizer runs with {key}={defaults[key]!r}; remove the override "
                "or train every weight on the vllm generation path"
            )
