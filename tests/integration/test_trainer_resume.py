"""A run killed after a checkpoint and resumed with trainer.resume_mode=auto ends with exactly the
parameters of an uninterrupted run (deterministic CPU mode), through the command-line entry point;
with full fine-tuning and with LoRA adapters."""

import os
import re
import shutil
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
RESUMED_FROM_1 = re.compile(r"resumed from \S+/global_step_1 at step 1\b")


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


def _wait_for(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        assert process.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within 5 minutes"
        time.sleep(0.01)


def _in_flight(log: Path) -> list[int]:
    """The steps whose background rollout the log shows started and not yet played."""
    text = log.read_text()
    started = {int(s) for s in re.findall(r"rollout of step (\d+): playing", text)}
    return sorted(started - {int(s) for s in re.findall(r"rollout of step (\d+): played", text)})


def test_sigkill_with_rollouts_in_flight_resumes_from_the_last_complete_checkpoint(
    trainer_overrides, tiny_model_path, tmp_path
):
    """max_off_policy 1, a checkpoint every step, two steps: the run is SIGKILLed right after
    checkpoint 1 is in place (a rollout plays in the background), and its resumption again while
    it writes checkpoint 2 (a rollout in flight, the checkpoint half written); the second
    resumption completes. Every resumption starts from checkpoint 1 and never from the half
    checkpoint; the final parameters are bit for bit those of a clean resumption from a copy of
    checkpoint 1, and no trained row lags by more than the bound."""
    overrides = trainer_overrides(
        "math", "algorithm.adv_estimator=masopd", "rollout.max_off_policy=1", "trainer.save_freq=1"
    )
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}

    def command(checkpoints: Path, steps: int) -> list[str]:
        return [*_command(overrides, checkpoints, tiny_model_path), f"trainer.total_training_steps={steps}"]

    def run(checkpoints: Path, steps: int, log: Path) -> str:
        with log.open("w") as out:
            done = subprocess.run(command(checkpoints, steps), cwd=tmp_path, env=env, stdout=out, stderr=out)
        assert done.returncode == 0, log.read_text()[-3000:]
        return log.read_text()

    def start(checkpoints: Path, log: Path) -> subprocess.Popen:
        with log.open("w") as out:
            return subprocess.Popen(command(checkpoints, 2), cwd=tmp_path, env=env, stdout=out, stderr=out)

    killed = tmp_path / "killed"
    logs = [tmp_path / f"killed-{i}.log" for i in range(3)]
    # 1. killed once checkpoint 1 is in place, with the rollout of a later step in flight
    process = start(killed, logs[0])
    _wait_for(lambda: (killed / "global_step_1").is_dir() and _in_flight(logs[0]), process, "checkpoint 1")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "global_step_2").exists(), "the run wrote checkpoint 2 before it was killed"
    # the reference: a clean resumption from a copy of that checkpoint
    reference = tmp_path / "reference"
    shutil.copytree(killed / "global_step_1", reference / "global_step_1")
    assert RESUMED_FROM_1.search(run(reference, 2, tmp_path / "reference.log"))

    # 2. its resumption killed while checkpoint 2 is half written, a rollout in flight
    process = start(killed, logs[1])

    def half_written() -> bool:
        temps = list(killed.glob(".tmp_global_step_2_*"))
        return bool(temps) and any(temps[0].rglob("*.pt")) and not (temps[0] / "manifest.json").exists()

    _wait_for(lambda: half_written() and _in_flight(logs[1]), process, "a half-written checkpoint 2")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "global_step_2").exists(), "checkpoint 2 was completed before the kill"
    assert list(killed.glob(".tmp_global_step_2_*")), "no half-written checkpoint was left"

    # 3. the second resumption completes, from checkpoint 1 again; the half checkpoint is never loaded
    run(killed, 2, logs[2])
    assert all(RESUMED_FROM_1.search(log.read_text()) for log in logs[1:])
    assert not list(killed.glob(".tmp_global_step_*")), "the save of step 2 left the half checkpoint"
    # every run trained a step before it ended; no row past the bound
    for log in logs:
        lags = [float(v) for v in re.findall(r"offpolicy/\w+/lag_max:([-\d.e]+)", log.read_text())]
        assert lags and max(lags) <= 1, log.name

    expected, actual = _shards(reference, 2), _shards(killed, 2)
    assert expected and expected.keys() == actual.keys()
    initial = _shards(reference, 1)
    assert any(not torch.equal(expected[k], initial[k]) for k in expected), "step 2 changed nothing"
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0, msg=key)
