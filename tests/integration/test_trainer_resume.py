"""A run killed after a checkpoint and resumed with trainer.resume_mode=auto ends with exactly the
parameters of an uninterrupted run (deterministic CPU mode), through the command-line entry point;
with full fine-tuning and with LoRA adapters."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES

pytestmark = pytest.mark.integration

POINTER = "latest_checkpointed_iteration.txt"


def _command(overrides: list[str], checkpoints: Path, teacher: str) -> list[str]:
    replaced = ("trainer.default_local_dir=", "teacher.model_path=")
    kept = [o for o in overrides if not o.startswith(replaced)]
    return [
        sys.executable,
        "-m",
        "verl_masopd.train",
        *kept,
        f"trainer.default_local_dir={checkpoints}",
        f"teacher.model_path={teacher}",
    ]


def _shards(checkpoints: Path, step: int) -> dict[str, torch.Tensor]:
    """The float32 model shards of every policy in checkpoint `step`."""
    folder = checkpoints / f"global_step_{step}"
    weights = {}
    for shard in sorted(folder.glob("policy_*/model_world_size_1_rank_0.pt")):
        state = torch.load(shard, weights_only=False)
        weights.update(
            {f"{shard.parent.name}/{k}": v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()}
        )
    return weights


@pytest.mark.parametrize("lora", [(), ("actor_rollout_ref.model.lora_rank=4",)], ids=["full", "lora"])
def test_killed_run_resumes_to_the_same_parameters(trainer_overrides, tiny_model_path, tmp_path, lora):
    overrides = trainer_overrides(
        "math", "algorithm.adv_estimator=masopd", "trainer.save_freq=1", "trainer.total_training_steps=2", *lora
    )
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}  # a child run picks its own

    def command(checkpoints: Path) -> list[str]:
        # the tiny student as its own teacher keeps the test fast; RAS still moves the weights
        return _command(overrides, checkpoints, tiny_model_path)

    straight = tmp_path / "straight"
    subprocess.run(command(straight), cwd=tmp_path, env=env, check=True, capture_output=True)

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        command(killed), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 600
    while not ((killed / POINTER).is_file() and (killed / POINTER).read_text().strip() == "1"):
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "global_step_2").exists(), "the run finished step 2 before it was killed"

    resumed = subprocess.run(command(killed), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout + resumed.stderr

    expected, actual = _shards(straight, 2), _shards(killed, 2)
    assert expected and expected.keys() == actual.keys()
    initial = _shards(straight, 1)
    moved = [k for k in expected if not torch.equal(expected[k], initial[k])]
    assert moved, "step 2 changed nothing"
    if lora:  # the adapters train, the base stays
        assert all("lora_" in k for k in moved) and any("lora_" in k for k in expected)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0, msg=key)
