"""Atomic checkpoints: contents round-trip (state, RNG, a real model + optimizer), the pointer
file names the newest complete one, a write killed midway is never resumed from, old
checkpoints are pruned, and the resume modes pick the right folder."""

import json
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_masopd.trainer import checkpoint as ckpt
from verl_masopd.trainer.checkpoint import (
    POINTER_FILE,
    TrainerState,
    changed_config_keys,
    checkpoint_steps,
    config_hash,
    find_resume_point,
    load_checkpoint,
    save_checkpoint,
)


@pytest.fixture
def cfg():
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}},
            "trainer": {"total_training_steps": 150, "resume_mode": "auto", "seed": 0},
        }
    )


def state(step: int, cfg) -> TrainerState:
    return TrainerState(step=step, data_position={"epoch": 0, "index": 2 * step}, config_hash=config_hash(cfg))


def note_writer(text: str):
    def write(folder):
        (folder / "note.txt").write_text(text)

    return write


def test_a_checkpoint_holds_state_config_rng_and_components(tmp_path, cfg):
    path = save_checkpoint(tmp_path, state(3, cfg), cfg, {"coder": note_writer("c"), "critic": note_writer("v")})
    assert path == tmp_path / "global_step_3"
    assert (tmp_path / POINTER_FILE).read_text() == "3"
    saved = json.loads((path / "trainer_state.json").read_text())
    assert saved == {"step": 3, "data_position": {"epoch": 0, "index": 6}, "config_hash": config_hash(cfg)}
    assert OmegaConf.load(path / "config.yaml").actor_rollout_ref.actor.optim.lr == 1e-6
    assert (path / "coder" / "note.txt").read_text() == "c" and (path / "critic" / "note.txt").read_text() == "v"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_model_optimizer_and_rng_states_round_trip(tmp_path, cfg):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()

    def write_policy(folder):
        torch.save(model.state_dict(), folder / "model.pt")
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": write_policy})
    expected = (random.random(), np.random.rand(), torch.rand(2))

    restored_model = torch.nn.Linear(3, 2)
    restored_optimizer = torch.optim.AdamW(restored_model.parameters(), lr=0.1)

    def read_policy(folder):
        restored_model.load_state_dict(torch.load(folder / "model.pt"))
        restored_optimizer.load_state_dict(torch.load(folder / "optimizer.pt"))

    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    loaded = load_checkpoint(path, {"coder": read_policy})
    assert loaded == state(1, cfg)
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(2), expected[2])
    assert torch.equal(restored_model.weight, model.weight)
    assert torch.equal(
        restored_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    with pytest.raises(FileNotFoundError, match=r"no folder for component\(s\) \['critic'\]"):
        load_checkpoint(path, {"critic": read_policy})


def test_a_failing_component_leaves_the_previous_checkpoint_as_resume_point(tmp_path, cfg):
    save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})

    def crash(folder):
        (folder / "half.bin").write_bytes(b"\0" * 100)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": crash})
    assert not (tmp_path / "global_step_2").exists()
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_1"
    assert checkpoint_steps(tmp_path) == [1]


def test_a_process_killed_mid_write_is_never_resumed_from(tmp_path, cfg):
    save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})
    script = textwrap.dedent(
        f"""
        import os, signal
        from omegaconf import OmegaConf
        from verl_masopd.trainer.checkpoint import TrainerState, save_checkpoint

        def killed(folder):
            (folder / "weights.bin").write_bytes(b"\\1" * 4096)
            os.kill(os.getpid(), signal.SIGKILL)

        cfg = OmegaConf.create({{"trainer": {{}}}})
        save_checkpoint({str(tmp_path)!r}, TrainerState(2, {{}}, "h"), cfg, {{"coder": killed}})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == -9
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp_global_step_2")]
    assert len(leftovers) == 1
    assert not (tmp_path / "global_step_2").exists()
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_1"

    save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": note_writer("two")})
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_2"


def test_a_kill_between_rename_and_pointer_keeps_the_old_resume_point(tmp_path, cfg, monkeypatch):
    save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})

    def killed(path, text):
        raise SystemExit("killed before the pointer was replaced")

    monkeypatch.setattr(ckpt, "_write_atomically", killed)
    with pytest.raises(SystemExit):
        save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": note_writer("orphan")})
    monkeypatch.undo()
    assert (tmp_path / "global_step_2").is_dir()
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_1"

    save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": note_writer("two")})
    assert (tmp_path / "global_step_2" / "coder" / "note.txt").read_text() == "two"
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_2"


def test_only_the_newest_checkpoints_are_kept(tmp_path, cfg):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, state(step, cfg), cfg, {}, max_to_keep=2)
    assert checkpoint_steps(tmp_path) == [3, 4]
    # A run resumed from an earlier step writes a lower step: that one is the newest and stays.
    save_checkpoint(tmp_path, state(2, cfg), cfg, {}, max_to_keep=2)
    assert checkpoint_steps(tmp_path) == [2, 4]
    assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_2"
    for step in (5, 6):
        save_checkpoint(tmp_path, state(step, cfg), cfg, {}, max_to_keep=None)
    assert checkpoint_steps(tmp_path) == [2, 4, 5, 6]


def test_resume_modes(tmp_path, cfg):
    assert find_resume_point(tmp_path, "auto") is None
    path = save_checkpoint(tmp_path, state(7, cfg), cfg, {})
    assert find_resume_point(tmp_path, "auto") == path
    assert find_resume_point(tmp_path, "disable") is None
    assert find_resume_point(tmp_path / "elsewhere", "resume_path", str(path)) == path
    with pytest.raises(FileNotFoundError, match="trainer.resume_from_path=.* is not a complete checkpoint"):
        find_resume_point(tmp_path, "resume_path", str(tmp_path))
    with pytest.raises(ValueError, match="trainer.resume_mode=resume_path needs trainer.resume_from_path"):
        find_resume_point(tmp_path, "resume_path", None)
    with pytest.raises(ValueError, match="trainer.resume_mode must be one of"):
        find_resume_point(tmp_path, "latest")
    (tmp_path / POINTER_FILE).write_text("9")
    with pytest.raises(FileNotFoundError, match="names step 9"):
        find_resume_point(tmp_path, "auto")


def test_config_hash_ignores_run_length_and_names_what_changed(tmp_path, cfg):
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {})
    longer = OmegaConf.merge(cfg, {"trainer": {"total_training_steps": 300, "resume_mode": "disable"}})
    assert config_hash(longer) == config_hash(cfg)
    assert changed_config_keys(path, longer) == []
    changed = OmegaConf.merge(cfg, {"actor_rollout_ref": {"actor": {"optim": {"lr": 2e-6}}}, "trainer": {"seed": 1}})
    assert config_hash(changed) != config_hash(cfg)
    assert changed_config_keys(path, changed) == ["actor_rollout_ref.actor.optim.lr", "trainer.seed"]
