"""sha256 digests of files and folders: how checkpoints, fetched models and the shipped tiny models
are checked.

    folder_sha256(folder) = {relative path: sha256 of its bytes} for every file under `folder`,
    sorted by path, less the names in `exclude`.

Files are hashed on several threads (hashlib releases the GIL), so a checkpoint of many shards
hashes at disk speed.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def relative_files(folder: Path, exclude: tuple[str, ...] = ()) -> list[str]:
    """Every file under `folder` as a POSIX path relative to it, sorted, less the names in `exclude`."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name not in exclude)


def sha256_of(folder: Path, files: list[str]) -> dict[str, str]:
    """{relative path: sha256} of `files` under `folder`."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(files, pool.map(lambda rel: sha256(folder / rel), files)))


def folder_sha256(folder: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    return sha256_of(folder, relative_files(folder, exclude))
