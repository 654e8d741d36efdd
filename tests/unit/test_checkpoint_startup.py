"""The checkpoint folder at start-up and at save time: a run that would write over checkpoints it
did not resume from, an unwritable folder or one without room for another checkpoint stops the
start before any model loads (a ConfigError naming the key); a damaged newest checkpoint is named
and moved aside in auto mode; a save that meets a full disk or a read-only folder fails in one
line naming the checkpoint and the cause, the last good checkpoint untouched.

Full and read-only file systems are real mounts (a 1 MiB tmpfs, a read-only bind mount): permission
bits do not stop root, which CI runs as; without the right to mount, those tests are skipped."""

import gc
import logging
import os
import re
import subprocess

import pytest
import torch

from data_prep.__main__ import main as data_prep_main
from verl_masopd.config import compose_config
from verl_masopd.config.run import TrainerSection
from verl_masopd.config.validate import composed_record, read_fields, validate_config
from verl_masopd.options.errors import ConfigError
from verl_masopd.trainer import checkpoint as ckpt
from verl_masopd.trainer.checkpoint import (
    POINTER_FILE,
    CheckpointError,
    TrainerState,
    checkpoint_steps,
    find_resume_point,
    prepare_checkpoint_folder,
    save_checkpoint,
    verify_checkpoint,
)
from verl_masopd.trainer.loop import Trainer


@pytest.fixture
def mount(tmp_path):
    """`mount(target, *arguments)`: `mount *arguments target`, unmounted after the test; skips the
    test where this process may not mount (not root)."""
    mounted = []

    def mount_at(target, *arguments):
        target.mkdir(exist_ok=True)
        result = subprocess.run(["mount", *arguments, str(target)], capture_output=True, text=True)
        if result.returncode:
            pytest.skip(f"needs the right to mount (root): {result.stderr.strip()}")
        mounted.append(target)
        return target

    yield mount_at
    gc.collect()  # a kept exception's frames may hold a failed writer's file open on the mount
    for target in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(target)], check=True)


@pytest.fixture(scope="module")
def math_data(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("data") / "math.parquet"
    assert data_prep_main(["builtin", "--domain", "math", "--output", str(path), "--n", "4"]) == 0
    return str(path)


@pytest.fixture
def run_cfg(tiny_model_path, math_data):
    """`run_cfg(checkpoints, *overrides)`: a CPU math run's config writing into `checkpoints`."""

    def make(checkpoints, *overrides):
        return compose_config(
            [
                "preset=cpu",
                "engines.placement=local",
                "algorithm.adv_estimator=grpo",
                f"students.path={tiny_model_path}",
                f"data.train_files=[{math_data}]",
                "workflow.domain=math",
                f"trainer.default_local_dir={checkpoints}",
                *overrides,
            ]
        )

    return make


def state(step: int) -> TrainerState:
    return TrainerState(step=step, data_position={}, config_hash="hash")


def weights_writer(numel: int):
    def write(folder):
        torch.save(torch.arange(numel, dtype=torch.float32), folder / "weights.pt")

    return write


def files_of(folder) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_fresh_start_into_a_folder_with_checkpoints_stops_before_any_model_loads(tmp_path, run_cfg):
    cfg = run_cfg(tmp_path, "trainer.resume_mode=disable")
    first = save_checkpoint(tmp_path, state(1), composed_record(cfg), {"policy_reasoner": weights_writer(10)})
    before = files_of(first)
    with pytest.raises(ConfigError) as stop:
        Trainer(validate_config(cfg))
    assert str(stop.value).startswith(
        f"trainer.resume_mode: disable, but trainer.default_local_dir={tmp_path} holds checkpoints (global_step_1) "
        "that a fresh start would overwrite"
    )
    assert files_of(first) == before


def test_a_resume_below_a_later_checkpoint_of_the_folder_stops(tmp_path, run_cfg):
    first = tmp_path / "global_step_1"
    cfg = run_cfg(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={first}")
    for step in (1, 2):
        save_checkpoint(tmp_path, state(step), composed_record(cfg), {"policy_reasoner": weights_writer(10)})
    with pytest.raises(ConfigError) as stop:
        Trainer(validate_config(cfg))
    assert str(stop.value).startswith(
        f"trainer.resume_from_path: {first} is step 1, but trainer.default_local_dir={tmp_path} holds later "
        "checkpoints (global_step_2) that this run would overwrite"
    )
    assert checkpoint_steps(tmp_path) == [1, 2]


def test_auto_moves_a_damaged_newest_checkpoint_aside_and_resumes_from_the_one_before(tmp_path, run_cfg, caplog):
    cfg = run_cfg(tmp_path)
    good = save_checkpoint(tmp_path, state(1), composed_record(cfg), {"policy_reasoner": weights_writer(1000)})
    bad = save_checkpoint(tmp_path, state(2), composed_record(cfg), {"policy_reasoner": weights_writer(1000)})
    weights = bad / "policy_reasoner" / "weights.pt"
    size = weights.stat().st_size
    os.truncate(weights, 100)
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        assert prepare_checkpoint_folder(read_fields(cfg, "trainer", TrainerSection)) == good
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("global_step_2.damaged-")]
    assert len(aside) == 1 and (aside[0] / "policy_reasoner" / "weights.pt").stat().st_size == 100
    assert f"skipping checkpoint {bad}: {weights}: 100 bytes, the manifest lists {size} (truncated" in caplog.text
    assert f"moved the damaged checkpoint {bad} aside to {aside[0]}" in caplog.text
    assert checkpoint_steps(tmp_path) == [1]
    save_checkpoint(
        tmp_path, state(2), composed_record(cfg), {"policy_reasoner": weights_writer(1000)}
    )  # the run's own step 2
    assert verify_checkpoint(tmp_path / "global_step_2")


def test_a_folder_whose_checkpoints_are_all_damaged_stops_the_start(tmp_path, run_cfg):
    cfg = run_cfg(tmp_path)
    only = save_checkpoint(tmp_path, state(1), composed_record(cfg), {"policy_reasoner": weights_writer(1000)})
    os.truncate(only / "policy_reasoner" / "weights.pt", 100)
    with pytest.raises(
        ConfigError, match=rf"^trainer.default_local_dir: no checkpoint under {tmp_path} can be resumed"
    ):
        Trainer(validate_config(cfg))
    assert only.is_dir()


def test_a_read_only_checkpoint_folder_stops_the_start(tmp_path, run_cfg, mount):
    (tmp_path / "source").mkdir()
    root = mount(tmp_path / "read-only", "--bind", "-o", "ro", str(tmp_path / "source"))
    with pytest.raises(ConfigError) as stop:
        Trainer(validate_config(run_cfg(root / "checkpoints")))
    assert str(stop.value) == (
        f"trainer.default_local_dir: {root / 'checkpoints'} is not writable (Read-only file system: {root})"
    )


def test_a_checkpoint_folder_without_room_for_one_more_checkpoint_stops_the_start(tmp_path, run_cfg, mount):
    root = mount(tmp_path / "small", "-t", "tmpfs", "-o", "size=1m", "tmpfs")
    cfg = run_cfg(root)
    last = save_checkpoint(
        root, state(1), composed_record(cfg), {"policy_reasoner": weights_writer(150_000)}
    )  # 600 kB of 1 MiB
    with pytest.raises(ConfigError) as stop:
        Trainer(validate_config(cfg))
    expected = (
        rf"trainer.default_local_dir: {re.escape(str(root))} has 0\.\d MiB free, less than one more checkpoint "
        rf"the size of {re.escape(str(last))} \(0\.\d MiB\)"
    )
    assert re.fullmatch(expected, str(stop.value)), str(stop.value)


def test_a_full_disk_fails_the_save_in_one_line_and_keeps_the_last_checkpoint(tmp_path, run_cfg, mount):
    root = mount(tmp_path / "small", "-t", "tmpfs", "-o", "size=1m", "tmpfs")
    cfg = run_cfg(root)
    first = save_checkpoint(root, state(1), composed_record(cfg), {"policy_reasoner": weights_writer(1000)})
    before = files_of(first)
    with pytest.raises(CheckpointError) as failed:
        save_checkpoint(root, state(2), composed_record(cfg), {"policy_reasoner": weights_writer(1 << 20)})  # 4 MiB
    assert str(failed.value) == (
        f"{root / 'global_step_2'}: writing policy_reasoner failed: no space left on the device of {root} "
        "(0 bytes free); the newest checkpoint there is global_step_1"
    )
    assert files_of(first) == before and verify_checkpoint(first)
    assert sorted(p.name for p in root.iterdir()) == ["global_step_1", POINTER_FILE]
    assert find_resume_point(root, "auto") == first


def test_a_read_only_folder_fails_the_save_in_one_line(tmp_path, run_cfg, mount):
    cfg = run_cfg(tmp_path / "checkpoints")
    first = save_checkpoint(
        tmp_path / "checkpoints", state(1), composed_record(cfg), {"policy_reasoner": weights_writer(10)}
    )
    root = mount(tmp_path / "read-only", "--bind", "-o", "ro", str(tmp_path / "checkpoints"))
    with pytest.raises(CheckpointError) as failed:
        save_checkpoint(root, state(2), composed_record(cfg), {"policy_reasoner": weights_writer(10)})
    message = str(failed.value)
    assert message.startswith(
        f"{root / 'global_step_2'}: writing the checkpoint folder failed: Read-only file system "
        f"({root}/.tmp_global_step_2_"
    )
    assert message.endswith("; the newest checkpoint there is global_step_1") and "\n" not in message
    assert verify_checkpoint(first)
