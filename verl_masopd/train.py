"""`python -m verl_masopd.train [Hydra overrides]`: train with config/masopd_trainer.yaml.

The config extends verl's ppo_trainer config; `preset=cpu` selects the tiny CPU sizes. A bad
command line, config or dataset stops before any model is loaded, with one line naming the
culprit, exit code 2, and nothing left of the run's Hydra folder (`hydra.run.dir`, by default
outputs/DATE/TIME). A checkpoint that cannot be written (no space, no permission) ends the run
with one line naming it and the cause, exit code 3; the run's Hydra folder (its log) stays.
"""

import sys

from verl_masopd.cli.quiet_import import import_verl_quietly

import_verl_quietly()

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig

from verl_masopd.cli.run_folder import remove_run_folder
from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.options.errors import ConfigError
from verl_masopd.trainer.checkpoint import CheckpointError
from verl_masopd.trainer.loop import run


def main() -> None:
    """Check the command line's overrides, then run Hydra's entry point with them."""
    check_overrides(sys.argv[1:])
    _train()


def check_overrides(arguments: list[str]) -> None:
    """Hydra's own refusals of the overrides (an unknown key or config option, bad override syntax),
    which Hydra prints over several lines with exit code 1, as one line and exit code 2."""
    if any(a.startswith("-") for a in arguments):
        return  # Hydra's flags (--help, --cfg, --multirun) are Hydra's to handle
    try:
        compose_config(arguments)
    except HydraException as e:
        lines = str(e).split("Config search path:")[0].split("\n")
        print(f"config error: {' '.join(line.strip() for line in lines if line.strip())}", file=sys.stderr)
        sys.exit(2)


@hydra.main(config_path="config", config_name="masopd_trainer", version_base="1.3")
def _train(cfg: DictConfig) -> None:
    """Hydra's composed `cfg`, read once into the run config (config/validate.py) that the run takes."""
    try:
        run(validate_config(cfg))
    except ConfigError as e:
        remove_run_folder()
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    except CheckpointError as e:
        print(f"checkpoint error: {e}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
