"""`distillation.distillation_loss` of a run's config, read at start into `DistillationSettings`
(algos/distillation.py, whose module docstring describes the modes) through verl's
`DistillationLossConfig`.

Refused at start, by key: a mode verl does not register; topk ≤ 0, or none for a top-k mode;
jsd_beta outside (0, 1); a coefficient that is negative or not finite; a clamp ≤ 0.
"""

from __future__ import annotations

import math

from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from verl.trainer.distillation.losses import DISTILLATION_SETTINGS_REGISTRY
from verl.utils.config import omega_conf_to_dataclass

from verl_masopd.algos.distillation import JSD_BETA, SECTION, DistillationSettings
from verl_masopd.options.defaults import packaged_default
from verl_masopd.options.errors import ConfigError, require

# for keys a partial section leaves out: the project config's values (masopd_trainer.yaml), and
# verl's config's for the clamp, which the project does not set
PROJECT_DEFAULTS = {
    "_target_": "verl.workers.config.DistillationLossConfig",
    "loss_max_clamp": None,
    **packaged_default(SECTION),
}


def read_distillation(config: DictConfig | None) -> DistillationSettings:
    """`distillation.distillation_loss` of a run's config through verl's dataclass (the project's
    values for the keys it leaves out, `PROJECT_DEFAULTS`; all of them when the section is absent);
    a value verl or this trainer refuses is a ConfigError naming the key."""
    section = OmegaConf.select(config, SECTION, default=None) if config is not None else None
    if section is None:
        return DistillationSettings()
    section = OmegaConf.merge(PROJECT_DEFAULTS, section)
    mode = section.get("loss_mode")
    require(
        mode in DISTILLATION_SETTINGS_REGISTRY,
        f"{SECTION}.loss_mode",
        f"{mode!r} is not one of verl's modes {sorted(DISTILLATION_SETTINGS_REGISTRY)}",
    )
    topk = section.get("topk")
    require(
        topk is None or (isinstance(topk, int) and not isinstance(topk, bool) and topk > 0),
        f"{SECTION}.topk",
        f"must be an integer > 0, got {topk!r}",
    )
    require(
        topk is not None or not DISTILLATION_SETTINGS_REGISTRY[mode].use_topk,
        f"{SECTION}.topk",
        f"{mode} reads the teacher's top-k log-probs: set topk",
    )
    beta = section.pop(JSD_BETA)
    require(
        isinstance(beta, int | float) and not isinstance(beta, bool) and 0 < beta < 1,
        f"{SECTION}.{JSD_BETA}",
        f"must be a number in (0, 1), got {beta!r}",
    )
    try:
        loss = omega_conf_to_dataclass(section)
    except (InstantiationException, ValueError, TypeError, NotImplementedError) as e:
        cause = e.__cause__ if isinstance(e, InstantiationException) and e.__cause__ is not None else e
        raise ConfigError(f"{SECTION}: {str(cause).splitlines()[0]}") from None
    coef = loss.distillation_loss_coef
    require(
        isinstance(coef, int | float) and math.isfinite(coef) and coef >= 0,
        f"{SECTION}.distillation_loss_coef",
        f"must be a finite number >= 0, got {coef!r}",
    )
    clamp = loss.loss_max_clamp
    require(clamp is None or clamp > 0, f"{SECTION}.loss_max_clamp", f"must be > 0 or null, got {clamp}")
    return DistillationSettings(
        loss.loss_mode,
        bool(loss.use_task_rewards),
        float(coef),
        clamp,
        bool(loss.use_policy_gradient),
        topk,
        loss.log_prob_min_clamp,
        float(beta),
    )
