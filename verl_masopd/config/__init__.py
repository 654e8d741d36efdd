"""The project's Hydra configs: `masopd_trainer.yaml` extends verl's `ppo_trainer` config.

`compose_config` builds the same config the command-line entry point gets, for code and tests.
Importing this module registers the `masopd_actor` resolver the yaml uses to take the actor's
loss settings from the estimator: `${masopd_actor:KEY,ESTIMATOR}` is
`verl_masopd.algos.specs.actor_settings(ESTIMATOR)[KEY]`, so switching
`algorithm.adv_estimator` switches the loss, and an explicit override that contradicts the
estimator is caught by the start-up validation.

The run config read from the composed config lives beside it: the sections and `RunConfig`
(run.py), `validate_config` (validate.py) and the readers it calls (estimator.py, actor_loss.py,
lora.py, teachers.py, distillation.py).
"""

from __future__ import annotations

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf

from verl_masopd.algos.specs import actor_settings

CONFIG_MODULE = "verl_masopd.config"
CONFIG_NAME = "masopd_trainer"

OmegaConf.register_new_resolver("masopd_actor", lambda key, estimator: actor_settings(estimator)[key], replace=True)


def compose_config(overrides: list[str] | None = None, config_name: str = CONFIG_NAME) -> DictConfig:
    """The composed config after Hydra `overrides` (e.g. ["preset=cpu", "workflow.domain=math"])."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        return compose(config_name=config_name, overrides=list(overrides or []))
