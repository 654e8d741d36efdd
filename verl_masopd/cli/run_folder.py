"""The Hydra run folder of a training start that fails: removed, exactly as far as Hydra made it.

Hydra creates `hydra.run.dir` (default `outputs/DATE/TIME`, or wherever an override points) with
all its missing parents before the task starts. `RunFolderGuard`, a Hydra callback registered in
`masopd_trainer.yaml`, runs before that: it resolves the folder once, pins `hydra.run.dir` to that
value (so a clock tick between two resolutions cannot move it) and records the deepest ancestor
that already exists. `remove_run_folder` then closes the log handlers that write into the folder,
removes what Hydra wrote there (its config copy and the job log) and the folders it created, from
the run folder up to that ancestor, each only while it is empty: files of anyone else are never
touched.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

_existing_ancestor: dict[Path, Path] = {}


class RunFolderGuard(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(str(config.hydra.run.dir)).absolute()
        with read_write(config.hydra.run), open_dict(config.hydra.run):
            config.hydra.run.dir = str(folder)
        ancestor = folder
        while not ancestor.exists():
            ancestor = ancestor.parent
        _existing_ancestor[folder] = ancestor


def remove_run_folder() -> None:
    """Remove this run's Hydra folder and the parents Hydra created for it, while they are empty."""
    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir).absolute()
    _close_file_handlers(folder)
    if hydra_cfg.output_subdir:
        shutil.rmtree(folder / hydra_cfg.output_subdir, ignore_errors=True)
    (folder / f"{hydra_cfg.job.name}.log").unlink(missing_ok=True)
    stop = _existing_ancestor.get(folder, Path(hydra_cfg.runtime.cwd).absolute())
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _close_file_handlers(folder: Path) -> None:
    """Detach and close every logging file handler writing inside `folder` (Hydra's job log)."""
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):
            if isinstance(handler, logging.FileHandler) and folder in Path(handler.baseFilename).parents:
                logger.removeHandler(handler)
                handler.close()
