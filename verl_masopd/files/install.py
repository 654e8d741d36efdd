"""Installing a finished folder in place of another in one step: the staging folder, written beside
the target on the same file system, is renamed onto it, so a reader sees the old folder or the new
one, never a part of either."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


def install(staging: Path, target: Path) -> None:
    """Replace `target` by the finished `staging` folder (same file system: a rename)."""
    staging.chmod(0o755)
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
        target.rename(old / target.name)
        staging.rename(target)
        shutil.rmtree(old)
    else:
        staging.rename(target)
