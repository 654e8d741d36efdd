"""Metrics logging through verl's `Tracking`, set up from the run config.

verl's `Tracking` writes to the backends named in `trainer.logger` (console, tensorboard, wandb,
...). Two things it takes from outside the call, handled here:
  - wandb receives the resolved config as a dict, and verl reads its `trainer` section;
  - TensorBoard writes to $TENSORBOARD_DIR, else to tensorboard_log/<project>/<experiment> under
    the working directory; `open_tracking` points it at <trainer.default_local_dir>/tensorboard,
    next to the checkpoints, unless TENSORBOARD_DIR is set.
Console and TensorBoard need no network; wandb runs offline with WANDB_MODE=offline (upload
later with `wandb sync`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path

from verl.utils.tracking import Tracking

from verl_masopd.config.run import TrainerSection


def open_tracking(trainer: TrainerSection, composed: Mapping) -> Tracking:
    """verl's `Tracking` for the backends of `trainer.logger`, given the resolved config `composed`
    (the run config's record); call `.log(metrics, step)`, then `.finish()`."""
    os.environ.setdefault("TENSORBOARD_DIR", str(Path(trainer.default_local_dir).expanduser() / "tensorboard"))
    return Tracking(
        project_name=trainer.project_name,
        experiment_name=trainer.experiment_name,
        default_backend=list(trainer.logger),
        config=copy.deepcopy(dict(composed)),
    )
