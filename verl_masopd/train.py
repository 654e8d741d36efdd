"""`python -m verl_masopd.train [Hydra overrides]`: train with config/masopd_trainer.yaml.

The config extends verl's ppo_trainer config; `preset=cpu` selects the tiny CPU sizes. A bad
config or dataset stops before any model is loaded, with one line naming the culprit, exit code
2, and nothing left of the run's Hydra folder (outputs/DATE/TIME).
"""

import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import verl_masopd.config  # noqa: F401  (registers the resolver the yaml uses)
from verl_masopd.trainer.config import ConfigError
from verl_masopd.trainer.loop import run


def remove_run_folder() -> None:
    """Remove what Hydra wrote for this run (its config copy and job log), then the run folder and
    its parents up to the working directory while they are empty; other files are never touched."""
    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.output_subdir:
        shutil.rmtree(folder / hydra_cfg.output_subdir, ignore_errors=True)
    (folder / f"{hydra_cfg.job.name}.log").unlink(missing_ok=True)
    stop = Path(hydra_cfg.runtime.cwd).resolve()
    folder = folder.resolve()
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


@hydra.main(config_path="config", config_name="masopd_trainer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except ConfigError as e:
        remove_run_folder()
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
