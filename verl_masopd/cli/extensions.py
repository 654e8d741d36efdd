"""Extensions a run imports before anything else: Python modules (`pkg.module`) or files
(`path/to/file.py`) whose `register_workflow` / `register_estimator` calls make a new workflow or
advantage estimator selectable by name (examples/solver_verifier.py, examples/custom_estimator.py).
The training config lists them under `imports`, saved with every checkpoint, so that evaluating
the checkpoint imports them again."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path


def import_extensions(items: list[str], key: str) -> None:
    """Import each item once; a missing or failing one raises ValueError naming it and `key`."""
    for item in items:
        try:
            if item.endswith(".py"):
                _import_file(Path(item).expanduser().resolve())
            else:
                importlib.import_module(item)
        except Exception as e:  # noqa: BLE001  (any failure of the user's module is reported as its own)
            raise ValueError(f"{key}: cannot import {item!r}: {type(e).__name__}: {e}") from None


def _import_file(path: Path) -> None:
    """Import the file at `path` unless a loaded module (the running script included) is it."""
    if not path.is_file():
        raise FileNotFoundError("no such file")
    if any(getattr(m, "__file__", None) and Path(m.__file__).resolve() == path for m in list(sys.modules.values())):
        return
    name = f"verl_masopd_extension_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
