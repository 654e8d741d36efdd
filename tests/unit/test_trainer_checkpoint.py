"""Atomic, verified checkpoints: contents round-trip (state, RNG, a real model + optimizer), a
manifest lists every file's size and sha256 and names the file that is missing, truncated or
altered, a write killed midway is never resumed from, a checkpoint is never replaced, old
checkpoints are pruned, auto resume takes the newest good checkpoint on disk (saying so when the
pointer file disagrees, naming what it skipped), and an exported config carries the source model's
attention."""

import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_masopd.engine.policy_engine import ATTENTION_KEY, restore_source_attention
from verl_masopd.platform.packed_attention import PACKED_SDPA
from verl_masopd.trainer import checkpoint as ckpt
from verl_masopd.trainer.checkpoint import (
    MANIFEST_FILE,
    POINTER_FILE,
    CheckpointError,
    TrainerState,
    changed_config_keys,
    checkpoint_steps,
    config_hash,
    find_resume_point,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)


@pytest.fixture
def cfg():
    """A resolved config record (the run config's `composed`)."""
    return {
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}},
        "trainer": {"total_training_steps": 150, "resume_mode": "auto", "seed": 0},
    }


def state(step: int, cfg) -> TrainerState:
    return TrainerState(step=step, data_position={"epoch": 0, "index": 2 * step}, config_hash=config_hash(cfg))


def note_writer(text: str):
    def write(folder):
        (folder / "note.txt").write_text(text)

    return write


def weights_writer(numel: int):
    """A component writing `numel` float32 weights with torch.save (as verl's engine does)."""

    def write(folder):
        torch.save(torch.arange(numel, dtype=torch.float32), folder / "weights.pt")

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
        from verl_masopd.trainer.checkpoint import TrainerState, save_checkpoint

        def killed(folder):
            (folder / "weights.bin").write_bytes(b"\\1" * 4096)
            os.kill(os.getpid(), signal.SIGKILL)

        cfg = {{"trainer": {{}}}}
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


def test_a_kill_between_rename_and_pointer_resumes_from_the_renamed_checkpoint(tmp_path, cfg, monkeypatch, caplog):
    save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})

    def killed(path, text):
        raise SystemExit("killed before the pointer was replaced")

    monkeypatch.setattr(ckpt, "_write_atomically", killed)
    with pytest.raises(SystemExit):
        save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": note_writer("two")})
    monkeypatch.undo()
    renamed = tmp_path / "global_step_2"
    assert (tmp_path / POINTER_FILE).read_text() == "1"
    # renamed only once complete, fsynced and hashed: the newest checkpoint, though the pointer lags
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        assert find_resume_point(tmp_path, "auto") == renamed
    assert f"{tmp_path / POINTER_FILE} names step '1': resuming from the newest good checkpoint on disk, {renamed}" in (
        caplog.text
    )


def test_a_checkpoint_is_never_replaced_nor_written_below_a_later_one(tmp_path, cfg):
    save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})
    save_checkpoint(tmp_path, state(3, cfg), cfg, {"coder": note_writer("three")})
    for step in (3, 2):
        with pytest.raises(CheckpointError, match=rf"global_step_{step}: not written, .* already holds global_step_3 "):
            save_checkpoint(tmp_path, state(step, cfg), cfg, {"coder": note_writer("again")})
    assert (tmp_path / "global_step_3" / "coder" / "note.txt").read_text() == "three"
    assert checkpoint_steps(tmp_path) == [1, 3] and (tmp_path / POINTER_FILE).read_text() == "3"
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())


def test_only_the_newest_checkpoints_are_kept(tmp_path, cfg):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, state(step, cfg), cfg, {}, max_to_keep=2)
    assert checkpoint_steps(tmp_path) == [3, 4]
    for step in (5, 6):
        save_checkpoint(tmp_path, state(step, cfg), cfg, {}, max_to_keep=None)
    assert checkpoint_steps(tmp_path) == [3, 4, 5, 6]


def test_resume_modes(tmp_path, cfg, caplog):
    assert find_resume_point(tmp_path, "auto") is None
    path = save_checkpoint(tmp_path, state(7, cfg), cfg, {})
    assert find_resume_point(tmp_path, "auto") == path
    assert find_resume_point(tmp_path, "disable") is None
    assert find_resume_point(tmp_path / "elsewhere", "resume_path", str(path)) == path
    with pytest.raises(CheckpointError, match=r"trainer.resume_from_path=.* cannot be resumed from: .*trainer_state"):
        find_resume_point(tmp_path, "resume_path", str(tmp_path))
    with pytest.raises(ValueError, match="trainer.resume_mode=resume_path needs trainer.resume_from_path"):
        find_resume_point(tmp_path, "resume_path", None)
    with pytest.raises(ValueError, match="trainer.resume_mode must be one of"):
        find_resume_point(tmp_path, "latest")
    (tmp_path / POINTER_FILE).write_text("9")
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        assert find_resume_point(tmp_path, "auto") == path
    assert "names step '9': resuming from the newest good checkpoint on disk" in caplog.text
    (path / "rng_state.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=rf"^trainer.resume_from_path={path} cannot be resumed from: {path}/rng"):
        find_resume_point(tmp_path, "resume_path", str(path))


def test_without_a_pointer_auto_resumes_from_the_newest_checkpoint_and_says_so(tmp_path, cfg, caplog):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, state(step, cfg), cfg, {"coder": note_writer(str(step))})
    (tmp_path / POINTER_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        assert find_resume_point(tmp_path, "auto") == tmp_path / "global_step_3"
    newest = tmp_path / "global_step_3"
    assert f"{tmp_path / POINTER_FILE} is missing: resuming from the newest good checkpoint on disk, {newest}" in (
        caplog.text
    )


def test_the_manifest_lists_every_file_with_its_size_and_sha256(tmp_path, cfg):
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": weights_writer(1000), "critic": note_writer("v")})
    listed = json.loads((path / MANIFEST_FILE).read_text())["files"]
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert sorted(listed) == [f for f in files if f != MANIFEST_FILE]
    assert sorted(listed) == [
        "coder/weights.pt",
        "config.yaml",
        "critic/note.txt",
        "rng_state.pt",
        "trainer_state.json",
    ]
    for rel, entry in listed.items():
        data = (path / rel).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert verify_checkpoint(path) is True


def test_a_damaged_file_is_named_with_what_is_wrong(tmp_path, cfg):
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": weights_writer(1000)})
    weights = path / "coder" / "weights.pt"
    original = weights.read_bytes()

    weights.write_bytes(original[:100])
    with pytest.raises(CheckpointError) as truncated:
        verify_checkpoint(path)
    assert (
        str(truncated.value) == f"{weights}: 100 bytes, the manifest lists {len(original)} (truncated or overwritten)"
    )

    flipped = bytearray(original)
    flipped[-10] ^= 0xFF
    weights.write_bytes(bytes(flipped))
    with pytest.raises(
        CheckpointError, match=rf"^{weights}: contents differ from the manifest \(sha256 [0-9a-f]{{64}}\)$"
    ):
        verify_checkpoint(path)
    assert verify_checkpoint(path, ("config.yaml",)) is True  # only the files asked for

    weights.unlink()
    with pytest.raises(CheckpointError, match=rf"^{weights}: missing \(the manifest lists {len(original)} bytes\)$"):
        verify_checkpoint(path)

    (path / MANIFEST_FILE).write_text('{"files": ')
    with pytest.raises(CheckpointError, match=rf"^{path / MANIFEST_FILE}: not a readable manifest \(JSONDecodeError"):
        verify_checkpoint(path)


def test_a_checkpoint_without_manifest_is_used_unverified(tmp_path, cfg, caplog):
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": note_writer("one")})
    (path / MANIFEST_FILE).unlink()  # as written before manifests
    with caplog.at_level(logging.INFO, logger=ckpt.__name__):
        assert verify_checkpoint(path) is False
        assert find_resume_point(tmp_path, "auto") == path
    assert f"{path} has no manifest.json (written before manifests): used unverified" in caplog.text


def test_auto_resume_skips_damaged_checkpoints_and_stops_when_none_is_good(tmp_path, cfg, caplog):
    good = save_checkpoint(tmp_path, state(1, cfg), cfg, {"coder": weights_writer(1000)})
    bad = save_checkpoint(tmp_path, state(2, cfg), cfg, {"coder": weights_writer(1000)})
    weights = bad / "coder" / "weights.pt"
    size = weights.stat().st_size
    os.truncate(weights, size // 2)
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        assert find_resume_point(tmp_path, "auto") == good
    skipped = f"skipping checkpoint {bad}: {weights}: {size // 2} bytes, the manifest lists {size} (truncated"
    assert skipped in caplog.text
    (good / "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match=rf"^no checkpoint under {tmp_path} can be resumed from: {weights}: .*; "):
        find_resume_point(tmp_path, "auto")


def test_the_exported_config_carries_the_source_models_attention(tmp_path):
    exported = tmp_path / "config.json"
    for source_value, expected in ((None, None), ("eager", "eager"), (PACKED_SDPA, None)):
        source = tmp_path / f"source-{source_value}"
        source.mkdir()
        (source / "config.json").write_text(json.dumps({} if source_value is None else {ATTENTION_KEY: source_value}))
        exported.write_text(json.dumps({ATTENTION_KEY: PACKED_SDPA, "hidden_size": 8}))
        restore_source_attention(exported, source)
        assert json.loads(exported.read_text()) == {"hidden_size": 8, **({ATTENTION_KEY: expected} if expected else {})}


def test_config_hash_ignores_run_length_and_names_what_changed(tmp_path, cfg):
    path = save_checkpoint(tmp_path, state(1, cfg), cfg, {})
    longer = OmegaConf.to_container(
        OmegaConf.merge(cfg, {"trainer": {"total_training_steps": 300, "resume_mode": "disable"}})
    )
    assert config_hash(longer) == config_hash(cfg)
    assert changed_config_keys(path, longer) == []
    changed = OmegaConf.to_container(
        OmegaConf.merge(cfg, {"actor_rollout_ref": {"actor": {"optim": {"lr": 2e-6}}}, "trainer": {"seed": 1}})
    )
    assert config_hash(changed) != config_hash(cfg)
    assert changed_config_keys(path, changed) == ["actor_rollout_ref.actor.optim.lr", "trainer.seed"]
