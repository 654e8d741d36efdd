"""Logging through verl's Tracking from the run config works offline: console lines, TensorBoard
event files next to the checkpoints, and an offline wandb run."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from verl_masopd.config import compose_config
from verl_masopd.config.run import TrainerSection
from verl_masopd.config.validate import composed_record, read_fields
from verl_masopd.trainer.tracking import open_tracking


def run_config(tmp_path, loggers):
    """The trainer section and the resolved config of a run logging to `loggers`."""
    cfg = compose_config(
        [
            "preset=cpu",
            "algorithm.adv_estimator=masopd",
            "students.path=/models/student",
            "trainer.project_name=verl_masopd",
            "trainer.experiment_name=math_mas_masopd",
            f"trainer.logger={loggers}",
            f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        ]
    )
    return read_fields(cfg, "trainer", TrainerSection), composed_record(cfg)


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    # set, then delete: monkeypatch then also removes the value open_tracking sets
    monkeypatch.setenv("TENSORBOARD_DIR", "")
    monkeypatch.delenv("TENSORBOARD_DIR")
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home"))
    (tmp_path / "wandb_home").mkdir()


def test_console_and_tensorboard_record_the_metrics(tmp_path, offline_env, capsys):
    tracking = open_tracking(*run_config(tmp_path, ["console", "tensorboard"]))
    tracking.log({"coder/advantage_mean": 0.25, "tester/reward_mean": -1.5}, step=1)
    tracking.log({"coder/advantage_mean": 0.5, "tester/reward_mean": -1.0}, step=2)
    tracking.finish()

    assert "step:2 - coder/advantage_mean:0.5 - tester/reward_mean:-1.0" in capsys.readouterr().out
    events = EventAccumulator(str(tmp_path / "checkpoints" / "tensorboard"))
    events.Reload()
    scalars = [(e.step, e.value) for e in events.Scalars("tester/reward_mean")]
    assert scalars == [(1, -1.5), (2, -1.0)]


def test_wandb_runs_offline(tmp_path, offline_env):
    tracking = open_tracking(*run_config(tmp_path, ["wandb"]))
    tracking.log({"coder/advantage_mean": 0.25}, step=1)
    tracking.finish()
    runs = list((tmp_path / "wandb_home" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
