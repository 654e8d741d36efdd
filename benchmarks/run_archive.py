"""A finished cell's run folders kept where a later session finds them (tiny_world_compare.py --archive).

A cell is one method × seed × domain. Once its training and evaluations are done, its folders
under RUNS (train/<domain>/, eval/<domain>-heldout/, eval-swap/<domain>-heldout/) are packed into
ARCHIVE/<method>/seed<k>/<domain>.tar.gz without the model checkpoints (global_step_*: only the
evaluations read them, and they are done); the TensorBoard logs, records, summaries, settings and
done.json markers stay, which is all the report reads. Before a comparison runs, every archive
whose folders RUNS lacks altogether is unpacked into RUNS, so that its steps are skipped as done.
"""

from __future__ import annotations

import tarfile
from pathlib import Path


def archive_path(archive: Path, method: str, seed: int, domain: str) -> Path:
    return archive / method / f"seed{seed}" / f"{domain}.tar.gz"


def pack(runs: Path, folders: list[Path], target: Path) -> None:
    """`folders` (under `runs`, each with done.json) into `target`, written atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "/checkpoints/global_step_" in f"/{info.name}" else info

    with tarfile.open(partial, "w:gz") as tar:
        for folder in folders:
            tar.add(folder, arcname=str(folder.relative_to(runs)), filter=keep)
    partial.replace(target)


def unpack_missing(archive: Path, runs: Path) -> int:
    """Unpack every archive none of whose folders `runs` has (a cell RUNS holds, even in part,
    is left to the comparison's own resuming); returns how many."""
    unpacked = 0
    for path in sorted(archive.glob("*/seed*/*.tar.gz")):
        with tarfile.open(path) as tar:
            tops = {Path(*Path(m.name).parts[:4]) for m in tar.getmembers() if len(Path(m.name).parts) >= 4}
            if any((runs / top).exists() for top in tops):
                continue
            tar.extractall(runs, filter="data")
            unpacked += 1
    return unpacked
