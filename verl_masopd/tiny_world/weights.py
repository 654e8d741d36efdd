"""The tiny world's shipped weights: where they live, their manifest, and its check.

`weights/<domain>/` holds `teacher/` and `student/` (Hugging Face folders, tokenizer included) and
`manifest.json`: the builder fingerprint, seed, schedule, the command that rebuilds them and the
sha256 of every file. A model whose files or builder do not match stops the run with a message
naming the file and the rebuild command. `build` writes into a temporary folder beside the
target and renames it into place, so nothing is ever half-written.
"""

from __future__ import annotations

import json
from pathlib import Path

from verl_masopd.files.digest import folder_sha256, sha256

WEIGHTS = Path(__file__).parent / "weights"
MODELS = ("student", "teacher")
MANIFEST = "manifest.json"


class WeightsError(RuntimeError):
    """Shipped or cached weights that do not match their manifest or builder."""


def rebuild_command(domain: str, options: str = "") -> str:
    """The build command of `domain`'s weights; `options` (" --teacher-steps 20000", ...) a variant's."""
    return f"python -m verl_masopd.tiny_world build --domain {domain}{options}"


def write_manifest(folder: Path, record: dict) -> None:
    """manifest.json for the models under `folder` (record: builder, seed, command, schedule, ...)."""
    files = {name: folder_sha256(folder / name) for name in MODELS}
    (folder / MANIFEST).write_text(json.dumps({**record, "files": files}, indent=2, sort_keys=True) + "\n")


def verified_models(domain: str, builder: str, root: Path = WEIGHTS) -> dict[str, str]:
    """{"student": path, "teacher": path} of `domain` after checking every file and the builder.

    Raises WeightsError naming the first file that is missing or differs, or a builder mismatch.
    """
    folder = root / domain
    rebuild = rebuild_command(domain)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise WeightsError(f"{manifest_path}: no tiny-world weights for {domain!r}; build them with: {rebuild}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("builder") != builder:
        raise WeightsError(
            f"{manifest_path}: built by builder {manifest.get('builder')}, but this code's builder is {builder}; "
            f"rebuild with: {rebuild}"
        )
    for name in MODELS:
        for relative, expected in manifest["files"][name].items():
            path = folder / name / relative
            if not path.is_file():
                raise WeightsError(f"{path}: missing; rebuild with: {rebuild}")
            if sha256(path) != expected:
                raise WeightsError(f"{path}: sha256 does not match {manifest_path}; rebuild with: {rebuild}")
    return {name: str(folder / name) for name in MODELS}
