"""`python -m verl_masopd.train [Hydra overrides]`: train with config/masopd_trainer.yaml.

The config extends verl's ppo_trainer config; `preset=cpu` selects the tiny CPU sizes. A bad
config or dataset stops before any model is loaded, with a message naming the culprit.
"""

import sys

import hydra
from omegaconf import DictConfig

import verl_masopd.config  # noqa: F401  (registers the resolver the yaml uses)
from verl_masopd.trainer.config import ConfigError
from verl_masopd.trainer.loop import run


@hydra.main(config_path="config", config_name="masopd_trainer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
