"""Atomic checkpoints under `trainer.default_local_dir`, and where a run resumes.

Layout (verl's names): `<root>/global_step_<k>/` holds
  trainer_state.json   step, problem-stream position, config hash
  config.yaml          the resolved config (to name what changed when a resume's hash differs)
  rng_state.pt         python, numpy and torch (and CUDA when present) RNG states
  <component>/         one folder per component, written by its callback (a policy's Hugging
                       Face weights + optimizer, the critic head, ...)
and `<root>/latest_checkpointed_iteration.txt` holds k of the newest complete checkpoint.

A save writes everything into a hidden temporary folder, fsyncs it, renames it to
`global_step_<k>` (atomic on one file system), then replaces the pointer file atomically. A
write killed at any point leaves either no `global_step_<k>` or one the pointer does not name
yet, so a resume never picks up a partial checkpoint; leftover temporary folders are removed by
the next save.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

POINTER_FILE = "latest_checkpointed_iteration.txt"
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.yaml"
RNG_FILE = "rng_state.pt"
STEP_PREFIX = "global_step_"
TEMP_PREFIX = ".tmp_global_step_"
RESUME_MODES = ("auto", "disable", "resume_path")

# Keys a resumed run may change without changing what it trains: length, bookkeeping, logging.
RESUME_FREE_KEYS = (
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "trainer.total_training_steps",
    "trainer.total_epochs",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.logger",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
)

ComponentWriter = Callable[[Path], None]


@dataclass(frozen=True)
class TrainerState:
    """What the step loop needs to continue: the last finished step and the problem-stream state."""

    step: int
    data_position: dict
    config_hash: str


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{step}"


def comparable_config(cfg: DictConfig) -> dict:
    """The resolved config without `RESUME_FREE_KEYS`."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in RESUME_FREE_KEYS:
        section, name = key.split(".")
        container.get(section, {}).pop(name, None)
    return container


def config_hash(cfg: DictConfig) -> str:
    """sha256 of the resolved config, `RESUME_FREE_KEYS` left out."""
    text = json.dumps(comparable_config(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def changed_config_keys(checkpoint: str | os.PathLike, cfg: DictConfig) -> list[str]:
    """Dotted keys whose value differs between the checkpoint's config and `cfg`."""
    saved = comparable_config(OmegaConf.load(Path(checkpoint) / CONFIG_FILE))
    return sorted(_differences(saved, comparable_config(cfg)))


def _differences(a, b, prefix: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return set().union(*(_differences(a.get(k), b.get(k), f"{prefix}{k}.") for k in set(a) | set(b)))
    return set() if a == b else {prefix.rstrip(".")}


def capture_rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: str | os.PathLike,
    state: TrainerState,
    cfg: DictConfig,
    components: Mapping[str, ComponentWriter],
    max_to_keep: int | None = None,
) -> Path:
    """Write checkpoint `state.step` atomically and return its folder.

    Each `components[name](folder)` writes into `<checkpoint>/<name>/` (already created). Keeps
    the newest `max_to_keep` checkpoints (None or <= 0: all).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    _remove_temporaries(root)
    temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{state.step}_", dir=root))
    try:
        (temp / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
        OmegaConf.save(cfg, temp / CONFIG_FILE, resolve=True)
        torch.save(capture_rng_state(), temp / RNG_FILE)
        for name, write in components.items():
            folder = temp / name
            folder.mkdir()
            write(folder)
        _fsync_tree(temp)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise

    final = step_dir(root, state.step)
    if final.exists():
        # A checkpoint of this step that the pointer never named (a run killed after the rename).
        shutil.rmtree(final)
    os.rename(temp, final)
    _fsync_dir(root)
    _write_atomically(root / POINTER_FILE, str(state.step))
    _prune(root, max_to_keep, keep=state.step)
    return final


def load_checkpoint(checkpoint: str | os.PathLike, components: Mapping[str, ComponentWriter]) -> TrainerState:
    """Restore RNG states, call `components[name](<checkpoint>/<name>)`, return the trainer state."""
    checkpoint = Path(checkpoint)
    state = TrainerState(**json.loads((checkpoint / STATE_FILE).read_text()))
    missing = [name for name in components if not (checkpoint / name).is_dir()]
    if missing:
        raise FileNotFoundError(f"checkpoint {checkpoint} has no folder for component(s) {missing}")
    restore_rng_state(torch.load(checkpoint / RNG_FILE, weights_only=False))
    for name, read in components.items():
        read(checkpoint / name)
    return state


def find_resume_point(root: str | os.PathLike, resume_mode: str, resume_from_path: str | None = None) -> Path | None:
    """The checkpoint a run starts from (`trainer.resume_mode`), or None for a fresh start.

    auto: the one `latest_checkpointed_iteration.txt` names, None when there is none;
    disable: None; resume_path: `resume_from_path`, which must be a complete checkpoint.
    """
    if resume_mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode must be one of {RESUME_MODES}, got {resume_mode!r}")
    if resume_mode == "disable":
        return None
    if resume_mode == "resume_path":
        if not resume_from_path:
            raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
        path = Path(resume_from_path).expanduser()
        if not (path / STATE_FILE).is_file():
            raise FileNotFoundError(
                f"trainer.resume_from_path={resume_from_path} is not a complete checkpoint (no {STATE_FILE})"
            )
        return path
    pointer = Path(root) / POINTER_FILE
    if not pointer.is_file():
        return None
    text = pointer.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{pointer} should hold a step number, holds {text!r}")
    path = step_dir(root, int(text))
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{pointer} names step {text}, but {path} is not a complete checkpoint")
    return path


def checkpoint_steps(root: str | os.PathLike) -> list[int]:
    """Steps of the complete checkpoints under `root`, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    steps = [
        int(p.name[len(STEP_PREFIX) :])
        for p in root.iterdir()
        if p.name.startswith(STEP_PREFIX) and p.name[len(STEP_PREFIX) :].isdigit() and (p / STATE_FILE).is_file()
    ]
    return sorted(steps)


def _prune(root: Path, max_to_keep: int | None, keep: int) -> None:
    """Remove all but the newest `max_to_keep` checkpoints; never `keep`, the one just written."""
    if not max_to_keep or max_to_keep <= 0:
        return
    older = [step for step in checkpoint_steps(root) if step != keep]
    for step in older[: max(0, len(older) - (max_to_keep - 1))]:
        shutil.rmtree(step_dir(root, step))


def _remove_temporaries(root: Path) -> None:
    for p in root.iterdir():
        if p.name.startswith(TEMP_PREFIX):
            shutil.rmtree(p, ignore_errors=True)


def _write_atomically(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    _fsync_dir(path.parent)


def _fsync_tree(folder: Path) -> None:
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
