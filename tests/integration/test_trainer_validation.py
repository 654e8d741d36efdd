"""`fit` validates on held-out problems with the evaluation sampling, logs through verl's
tracking (console + TensorBoard) and leaves an atomic checkpoint of the last step."""

import pytest

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration


def test_fit_validates_logs_and_checkpoints(trainer_overrides, scripted_backends, builtin_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tensorboard"))
    cfg = compose_config(
        trainer_overrides(
            "code",
            "algorithm.adv_estimator=grpo",
            f"data.val_files=[{builtin_data['code']}]",
            "trainer.test_freq=1",
            "trainer.total_training_steps=1",
            "trainer.logger=[console,tensorboard]",
            "workflow.horizon=1",
        )
    )
    trainer = Trainer(validate_config(cfg), backend_factory=scripted_backends("code"))
    assert trainer.val_manager.sampling.temperature == 0.6 and trainer.val_manager.sampling.top_k == 20

    metrics = trainer.fit()

    assert metrics["val/problems"] == 8 and metrics["val/episodes"] == 8
    # one turn each; every other Coder answer is the reference solution: half the problems are solved
    assert metrics["val/accuracy"] == pytest.approx(0.5)
    assert 0.0 <= metrics["val/agreement@0"] <= 1.0
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    checkpoints = tmp_path / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (checkpoints / "global_step_1" / "policy_coder" / "huggingface" / "config.json").is_file()
