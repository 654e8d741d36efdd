"""Checkpoints of real tiny training runs (the command-line entry point, local engines, CPU).

A run whose pointer file is gone resumes from the newest checkpoint on disk and replaces none; a
truncated newest checkpoint is named, skipped and kept aside; evaluating a truncated checkpoint is
one line and leaves no --out folder; a full disk mid-run ends the run with one line; every
policy's exported huggingface/ folder loads and runs with plain transformers in a process that
never imports this project, while this project's engines still attend with sdpa_packed on it.
The two-step run every test copies is trained once per module."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_masopd.engine.policy_engine import RENDEZVOUS_VARIABLES, EngineSettings, PolicyEngine
from verl_masopd.eval.__main__ import main as eval_main
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.tiny_world.builder import RECIPES
from verl_masopd.tiny_world.weights import WEIGHTS

pytestmark = pytest.mark.integration

POINTER = "latest_checkpointed_iteration.txt"
SHARD = "policy_reasoner/model_world_size_1_rank_0.pt"

# Loads and runs each folder with transformers alone; run with `python -I` (no PYTHONPATH, no cwd).
PLAIN_LOAD = """
import sys

import torch
import transformers

for folder in sys.argv[1:]:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    ids = transformers.AutoTokenizer.from_pretrained(folder)("12 + 30 =", return_tensors="pt").input_ids
    logits = model(ids).logits
    assert logits.shape[:2] == ids.shape and torch.isfinite(logits).all(), folder
ours = sorted(name for name in sys.modules if name.split(".")[0] in ("verl", "verl_masopd"))
assert not ours, ours
print("loaded", len(sys.argv) - 1)
"""


@pytest.fixture(scope="module")
def train(tiny_model_path, builtin_data):
    """`train(checkpoints, steps)`: a masopd math run (the tiny student its own teacher) saving every
    step into `checkpoints`, started in its parent folder; the finished process."""
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARIABLES}

    def run(checkpoints: Path, steps: int) -> subprocess.CompletedProcess:
        command = [
            sys.executable,
            "-m",
            "verl_masopd.train",
            "preset=cpu",
            "engines.placement=local",
            f"students.path={tiny_model_path}",
            f"teacher.model_path={tiny_model_path}",
            f"data.train_files=[{builtin_data['math']}]",
            "workflow.domain=math",
            "data.train_batch_size=1",
            "data.max_response_length=24",
            "rollout.group_size=2",
            "workflow.horizon=2",
            "algorithm.adv_estimator=masopd",
            "trainer.save_freq=1",
            f"trainer.total_training_steps={steps}",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={checkpoints}",
        ]
        return subprocess.run(command, cwd=checkpoints.parent, env=env, capture_output=True, text=True, timeout=900)

    return run


@pytest.fixture(scope="module")
def trained(train, tmp_path_factory) -> Path:
    """The checkpoint folder of a two-step run: global_step_1, global_step_2 and the pointer file."""
    checkpoints = tmp_path_factory.mktemp("trained") / "checkpoints"
    result = train(checkpoints, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    return checkpoints


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MiB tmpfs at tmp_path/small, unmounted after; skips where this process may not mount."""
    target = tmp_path / "small"
    target.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(target)], capture_output=True)
    if result.returncode:
        pytest.skip(f"needs the right to mount (root): {result.stderr.decode().strip()}")
    yield target
    subprocess.run(["umount", "--lazy", str(target)], check=True)


def copy_of(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "checkpoints"))


def digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_run_without_its_pointer_file_resumes_from_the_newest_checkpoint(trained, train, tmp_path):
    checkpoints = copy_of(trained, tmp_path)
    (checkpoints / POINTER).unlink()
    before = {step: digests(checkpoints / f"global_step_{step}") for step in (1, 2)}

    result = train(checkpoints, 3)

    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    newest = checkpoints / "global_step_2"
    assert f"{checkpoints / POINTER} is missing: resuming from the newest good checkpoint on disk, {newest}" in output
    assert f"resumed from {newest} at step 2" in output
    assert {step: digests(checkpoints / f"global_step_{step}") for step in (1, 2)} == before
    assert sorted(p.name for p in checkpoints.iterdir()) == ["global_step_1", "global_step_2", "global_step_3", POINTER]


def test_a_truncated_newest_checkpoint_is_named_skipped_and_kept_aside(trained, train, tmp_path):
    checkpoints = copy_of(trained, tmp_path)
    shard = checkpoints / "global_step_2" / SHARD
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    first = digests(checkpoints / "global_step_1")

    result = train(checkpoints, 2)

    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    reason = f"{shard}: {size // 2} bytes, the manifest lists {size} (truncated or overwritten)"
    assert f"skipping checkpoint {checkpoints / 'global_step_2'}: {reason}" in output
    assert f"resumed from {checkpoints / 'global_step_1'} at step 1" in output
    [aside] = [p for p in checkpoints.iterdir() if p.name.startswith("global_step_2.damaged-")]
    assert (aside / SHARD).stat().st_size == size // 2
    assert digests(checkpoints / "global_step_1") == first
    written = checkpoints / "global_step_2"
    listed = json.loads((written / "manifest.json").read_text())["files"]
    assert {rel: entry["sha256"] for rel, entry in listed.items()} == {
        rel: digest for rel, digest in digests(written).items() if rel != "manifest.json"
    }


def test_evaluating_a_truncated_checkpoint_is_one_line_and_leaves_no_out_folder(
    trained, builtin_data, tmp_path, capsys
):
    checkpoints = copy_of(trained, tmp_path)
    weights = checkpoints / "global_step_2" / "policy_reasoner" / "huggingface" / "model.safetensors"
    size = weights.stat().st_size
    os.truncate(weights, size - 1000)
    out = tmp_path / "out"
    capsys.readouterr()

    assert eval_main(["--data", builtin_data["math"], "--checkpoint", str(checkpoints), "--out", str(out)]) == 2

    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --checkpoint {checkpoints}: {weights}: {size - 1000} bytes, the manifest lists {size} "
        "(truncated or overwritten)"
    ]
    assert not out.exists()


def test_exported_policies_load_and_run_with_plain_transformers(trained, tmp_path):
    exported = sorted((trained / "global_step_2").glob("policy_*/huggingface"))
    shipped = sorted(config.parent for config in WEIGHTS.glob("*/*/config.json"))
    worlds = {manifest.parent.name for manifest in WEIGHTS.glob("*/manifest.json")}
    assert len(exported) == 2 and set(RECIPES) == worlds and len(shipped) == 2 * len(worlds)  # a teacher, a student
    for folder in exported:
        assert "attn_implementation" not in json.loads((folder / "config.json").read_text())

    folders = [str(folder) for folder in exported + shipped]
    result = subprocess.run(
        [sys.executable, "-I", "-c", PLAIN_LOAD, *folders], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["loaded", str(len(folders))]


def test_this_projects_engines_still_attend_with_sdpa_packed_on_an_exported_policy(trained):
    folder = trained / "global_step_2" / "policy_reasoner" / "huggingface"
    engine = PolicyEngine.local(EngineSettings(model_path=str(folder), forward_only=True))
    # shared-prefix scoring refuses any attention but sdpa_packed (teacher/prefix_scoring.py)
    scores, _ = engine.score_shared_prefix([ScoreRequest([5, 6, 7], [8, 9]), ScoreRequest([5, 6, 7], [10])])
    assert [len(s) for s in scores] == [2, 1] and all(x < 0 for s in scores for x in s)


def test_a_full_disk_mid_run_ends_it_with_one_line(train, tmpfs):
    result = train(tmpfs, 1)

    assert result.returncode == 3, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"checkpoint error: {tmpfs / 'global_step_1'}: writing policy_"), last
    assert f"failed: no space left on the device of {tmpfs} (0 bytes free); no checkpoint there" in last
    assert list(tmpfs.iterdir()) == []
