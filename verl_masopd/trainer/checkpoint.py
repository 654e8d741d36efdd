"""Atomic, verified checkpoints under `trainer.default_local_dir`, and where a run resumes.

Layout (verl's names): `<root>/global_step_<k>/` holds
  trainer_state.json   step, problem-stream position, config hash
  config.yaml          the resolved config (to name what changed when a resume's hash differs)
  rng_state.pt         python, numpy and torch (and CUDA when present) RNG states
  <component>/         one folder per component, written by its callback (a policy's Hugging
                       Face weights + optimizer, the critic head, ...)
  manifest.json        {"files": {relative path: {"size": bytes, "sha256": hex}}} of every other
                       file of the checkpoint
and `<root>/latest_checkpointed_iteration.txt` holds k of the checkpoint written last (verl's
pointer file; this module reads it only to warn when it disagrees with the folders).

Writing. A save writes everything into a hidden temporary folder, hashes every file into
manifest.json there, fsyncs it, renames it to `global_step_<k>` (atomic on one file system), then
replaces the pointer file atomically. A write killed at any point leaves either no
`global_step_<k>` or a complete one; leftover temporary folders are removed by the next save. A
save never replaces an existing `global_step_<k>` and never writes a step below one the folder
holds, so the highest step is the newest. A save that fails for lack of space or permission
raises `CheckpointError` naming the checkpoint, the part being written and the cause; whichever
way a save fails, the folder's checkpoints are as they were.

Reading. A checkpoint is verified against its manifest before it is used: sizes, then sha256
(streamed); the first file that is missing, of another size or with other contents is named. A
checkpoint without manifest.json (written before manifests) is used unverified, logged at INFO.

Resuming (`prepare_checkpoint_folder`, at start-up before any model loads; `trainer.resume_mode`):
  auto         the newest checkpoint on disk that verifies. A missing pointer file, or one naming
               another step, is a warning naming the checkpoint used; each newer checkpoint that
               does not verify is a warning with the file and the reason, and is moved aside to
               `global_step_<k>.damaged-<random>` (kept, never again a resume point), so this run's
               own save of step k does not collide with it. A folder with checkpoints of which
               none verifies stops the start.
  resume_path  trainer.resume_from_path, which must verify; the start stops when
               trainer.default_local_dir holds a checkpoint newer than it (this run's saves would
               collide with them; branch into a new folder instead).
  disable      a fresh start; it stops when trainer.default_local_dir holds any `global_step_<k>`.
The folder (or its nearest existing parent) must accept a new entry, and its file system must
have room for one more checkpoint the size of the one resumed from. Every stop is a ConfigError
naming the key.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from verl_masopd.config.run import RESUME_MODES, TrainerSection
from verl_masopd.files.digest import relative_files, sha256_of
from verl_masopd.options.errors import ConfigError, require

logger = logging.getLogger(__name__)

POINTER_FILE = "latest_checkpointed_iteration.txt"
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.yaml"
RNG_FILE = "rng_state.pt"
MANIFEST_FILE = "manifest.json"
STEP_PREFIX = "global_step_"
TEMP_PREFIX = ".tmp_global_step_"
DAMAGED_INFIX = ".damaged-"
# A write that failed with less than this free on the checkpoint's file system failed for lack of
# space (torch's writer reports a full disk as "basic_ios::clear: iostream error", without errno).
LOW_SPACE_BYTES = 1 << 20
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})

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


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written, or one that is damaged; the one-line message names the
    path and the cause."""


@dataclass(frozen=True)
class TrainerState:
    """What the step loop needs to continue: the last finished step and the problem-stream state."""

    step: int
    data_position: dict
    config_hash: str


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{step}"


def comparable_config(composed: Mapping) -> dict:
    """The resolved config (the run config's `composed` record) without `RESUME_FREE_KEYS`."""
    container = copy.deepcopy(dict(composed))
    for key in RESUME_FREE_KEYS:
        section, name = key.split(".")
        container.get(section, {}).pop(name, None)
    return container


def config_hash(composed: Mapping) -> str:
    """sha256 of the resolved config, `RESUME_FREE_KEYS` left out."""
    text = json.dumps(comparable_config(composed), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def changed_config_keys(checkpoint: str | os.PathLike, composed: Mapping) -> list[str]:
    """Dotted keys whose value differs between the checkpoint's config and the resolved config `composed`."""
    saved = comparable_config(OmegaConf.to_container(OmegaConf.load(Path(checkpoint) / CONFIG_FILE)))
    return sorted(_differences(saved, comparable_config(composed)))


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
    composed: Mapping,
    components: Mapping[str, ComponentWriter],
    max_to_keep: int | None = None,
) -> Path:
    """Write checkpoint `state.step` atomically, with its manifest, and return its folder.

    `composed` (the resolved config) is saved as config.yaml. Each `components[name](folder)`
    writes into `<checkpoint>/<name>/` (already created). Keeps the newest `max_to_keep`
    checkpoints (None or <= 0: all). CheckpointError when `root` already holds this step or a
    later one, and when the write fails for lack of space or permission (other failures propagate
    as they are); the temporary folder is removed either way.
    """
    root = Path(root)
    final = step_dir(root, state.step)
    later = [folder.name for folder in step_folders(root) if _step_of(folder) >= state.step]
    if later:
        raise CheckpointError(
            f"{final}: not written, {root} already holds {', '.join(later)} (a checkpoint is never replaced, "
            "and a folder's steps only grow)"
        )
    temp, part = None, "the checkpoint folder"
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_temporaries(root)
        temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{state.step}_", dir=root))
        part = "the trainer state"
        (temp / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
        OmegaConf.save(OmegaConf.create(composed), temp / CONFIG_FILE)
        torch.save(capture_rng_state(), temp / RNG_FILE)
        for name, write in components.items():
            part = name
            folder = temp / name
            folder.mkdir()
            write(folder)
        part = MANIFEST_FILE
        write_manifest(temp)
        _fsync_tree(temp)
        os.rename(temp, final)
        temp = None
        part = POINTER_FILE
        _fsync_dir(root)
        _write_atomically(root / POINTER_FILE, str(state.step))
        part = "the pruning of older checkpoints"
        _prune(root, max_to_keep, keep=state.step)
    except Exception as e:
        cause = _storage_cause(root, e)
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        if cause is None:
            raise
        kept = checkpoint_steps(root)
        newest = f"the newest checkpoint there is {step_dir(root, kept[-1]).name}" if kept else "no checkpoint there"
        raise CheckpointError(f"{final}: writing {part} failed: {cause}; {newest}") from e
    except BaseException:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        raise
    return final


def load_checkpoint(checkpoint: str | os.PathLike, components: Mapping[str, ComponentWriter]) -> TrainerState:
    """Restore RNG states, call `components[name](<checkpoint>/<name>)`, return the trainer state.

    `checkpoint` is one `find_resume_point` chose, which verified it."""
    checkpoint = Path(checkpoint)
    state = TrainerState(**json.loads((checkpoint / STATE_FILE).read_text()))
    missing = [name for name in components if not (checkpoint / name).is_dir()]
    if missing:
        raise FileNotFoundError(f"checkpoint {checkpoint} has no folder for component(s) {missing}")
    restore_rng_state(torch.load(checkpoint / RNG_FILE, weights_only=False))
    for name, read in components.items():
        read(checkpoint / name)
    return state


def write_manifest(folder: Path) -> None:
    """`folder/manifest.json`: size and sha256 of every other file under `folder`."""
    files = [rel for rel in relative_files(folder) if rel != MANIFEST_FILE]
    sums = sha256_of(folder, files)
    entries = {rel: {"size": (folder / rel).stat().st_size, "sha256": sums[rel]} for rel in files}
    (folder / MANIFEST_FILE).write_text(json.dumps({"files": entries}, indent=1, sort_keys=True) + "\n")


def verify_checkpoint(checkpoint: str | os.PathLike, patterns: tuple[str, ...] = ()) -> bool:
    """Check the files of `checkpoint` its manifest lists (those whose relative path matches one of
    the fnmatch `patterns`, all when none are given): sizes first, then sha256.

    True when they match, False when the checkpoint has no manifest.json (unverified, logged);
    CheckpointError naming the first file that is missing, of another size or with other contents.
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / MANIFEST_FILE
    if not path.is_file():
        logger.info("%s has no %s (written before manifests): used unverified", checkpoint, MANIFEST_FILE)
        return False
    try:
        listed = {
            rel: (int(entry["size"]), str(entry["sha256"]))
            for rel, entry in json.loads(path.read_text())["files"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: not a readable manifest ({type(e).__name__}: {e})") from None
    wanted = [rel for rel in sorted(listed) if not patterns or any(fnmatch(rel, p) for p in patterns)]
    for rel in wanted:
        file, size = checkpoint / rel, listed[rel][0]
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (the manifest lists {size} bytes)")
        if file.stat().st_size != size:
            raise CheckpointError(
                f"{file}: {file.stat().st_size} bytes, the manifest lists {size} (truncated or overwritten)"
            )
    sums = sha256_of(checkpoint, wanted)
    for rel in wanted:
        if sums[rel] != listed[rel][1]:
            raise CheckpointError(f"{checkpoint / rel}: contents differ from the manifest (sha256 {sums[rel]})")
    return True


def find_resume_point(root: str | os.PathLike, resume_mode: str, resume_from_path: str | None = None) -> Path | None:
    """The checkpoint a run starts from (`trainer.resume_mode`), verified, or None for a fresh start.

    auto: the newest checkpoint under `root` that verifies, warning about every newer one that
    does not (the file and why) and about a pointer file that is missing or names another step;
    None when `root` holds no `global_step_<k>`; CheckpointError when it holds some but none verifies.
    disable: None. resume_path: `resume_from_path`, which must be a complete checkpoint that verifies
    (CheckpointError).
    """
    if resume_mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode must be one of {RESUME_MODES}, got {resume_mode!r}")
    if resume_mode == "disable":
        return None
    if resume_mode == "resume_path":
        if not resume_from_path:
            raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
        path = Path(resume_from_path).expanduser()
        problem = _unusable(path)
        if problem is not None:
            raise CheckpointError(f"trainer.resume_from_path={resume_from_path} cannot be resumed from: {problem}")
        return path
    root = Path(root)
    pointer = root / POINTER_FILE
    named = pointer.read_text().strip() if pointer.is_file() else None
    problems = []
    for folder in reversed(step_folders(root)):
        problem = _unusable(folder)
        if problem is None:
            if named != str(_step_of(folder)):
                said = "is missing" if named is None else f"names step {named!r}"
                logger.warning("%s %s: resuming from the newest good checkpoint on disk, %s", pointer, said, folder)
            return folder
        logger.warning("skipping checkpoint %s: %s", folder, problem)
        problems.append(problem)
    if problems:
        raise CheckpointError(f"no checkpoint under {root} can be resumed from: {'; '.join(problems)}")
    if named is not None:
        logger.warning("%s names step %r, but %s holds no checkpoint: a fresh start", pointer, named, root)
    return None


def prepare_checkpoint_folder(trainer: TrainerSection) -> Path | None:
    """The start-up checks of `trainer.default_local_dir` (the module docstring's "Resuming"), run
    before any model loads; returns the checkpoint the run resumes from, None for a fresh start.

    ConfigError naming the key when the mode or path is bad, the folder refuses a new entry, a
    fresh or resumed run would write over a checkpoint it did not resume from, or the file system
    has less free space than the checkpoint resumed from takes. In auto mode the damaged
    checkpoints newer than the resume point are moved aside (warned about).
    """
    root = Path(trainer.default_local_dir).expanduser()
    mode = trainer.resume_mode
    where = _nearest_existing(root)
    problem = _refuses_entries(where)
    require(problem is None, "trainer.default_local_dir", f"{root} is not writable ({problem}: {where})")
    try:
        resume = find_resume_point(root, mode, trainer.resume_from_path)
    except CheckpointError as e:  # resume_path's message starts with its key
        raise ConfigError(str(e) if mode == "resume_path" else f"trainer.default_local_dir: {e}") from None
    start = json.loads((resume / STATE_FILE).read_text())["step"] if resume is not None else 0
    later = [folder for folder in step_folders(root) if _step_of(folder) > start]
    names = ", ".join(folder.name for folder in later)
    require(
        mode != "disable" or not later,
        "trainer.resume_mode",
        f"disable, but trainer.default_local_dir={root} holds checkpoints ({names}) that a fresh start would "
        "overwrite; resume from them (trainer.resume_mode=auto) or give trainer.default_local_dir a new folder",
    )
    require(
        mode != "resume_path" or not later,
        "trainer.resume_from_path",
        f"{resume} is step {start}, but trainer.default_local_dir={root} holds later checkpoints ({names}) that "
        f"this run would overwrite; give trainer.default_local_dir a new folder to branch from step {start}",
    )
    for folder in later:  # auto: the damaged checkpoints find_resume_point skipped
        aside = Path(tempfile.mkdtemp(prefix=f"{folder.name}{DAMAGED_INFIX}", dir=root))
        os.rename(folder, aside)
        logger.warning("moved the damaged checkpoint %s aside to %s", folder, aside)
    if resume is not None:
        need, free = _tree_size(resume), shutil.disk_usage(where).free
        require(
            free >= need,
            "trainer.default_local_dir",
            f"{root} has {_mib(free)} free, less than one more checkpoint the size of {resume} ({_mib(need)})",
        )
    return resume


def step_folders(root: str | os.PathLike) -> list[Path]:
    """Every `global_step_<k>` folder under `root`, complete or not, by ascending k."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(STEP_PREFIX) and p.name[len(STEP_PREFIX) :].isdigit()]
    return sorted(found, key=_step_of)


def checkpoint_steps(root: str | os.PathLike) -> list[int]:
    """Steps of the complete checkpoints (with a trainer state) under `root`, ascending."""
    return [_step_of(folder) for folder in step_folders(root) if (folder / STATE_FILE).is_file()]


def _step_of(folder: Path) -> int:
    return int(folder.name[len(STEP_PREFIX) :])


def _unusable(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (no trainer state, or it does not verify); None if it can."""
    if not (checkpoint / STATE_FILE).is_file():
        return f"{checkpoint / STATE_FILE}: missing (not a complete checkpoint)"
    try:
        verify_checkpoint(checkpoint)
    except CheckpointError as e:
        return str(e)
    return None


def _tree_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def _refuses_entries(folder: Path) -> str | None:
    """Why `folder` does not take a new sub-folder (errno text), None when it does; a real probe,
    since permission bits do not stop root but a read-only or full file system does."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write_probe_", dir=folder))
    except OSError as e:
        return e.strerror
    return None


def _storage_cause(root: Path, error: Exception) -> str | None:
    """Why a write under `root` failed when the storage is the reason, else None: an errno of
    `STORAGE_ERRNOS` in the exception chain, less than `LOW_SPACE_BYTES` free, or a folder that
    refuses a new entry."""
    seen, link = set(), error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in STORAGE_ERRNOS:
            return f"{link.strerror} ({link.filename})" if link.filename else link.strerror
        link = link.__cause__ or link.__context__
    where = _nearest_existing(root)
    free = shutil.disk_usage(where).free
    if free < LOW_SPACE_BYTES:
        return f"no space left on the device of {where} ({free} bytes free)"
    problem = _refuses_entries(where)
    return None if problem is None else f"{where} is not writable ({problem})"


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
