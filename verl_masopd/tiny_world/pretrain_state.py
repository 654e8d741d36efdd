"""A tiny-world build's resumable state (`python -m verl_masopd.tiny_world build --state DIR`): the
pretraining run's state before a teacher step, written atomically to DIR/state.pt, and read back
only by a build of the same builder fingerprint.

The state (pretrain.py's `on_state`): the step s, the model's and the optimizer's state, the
demonstration stream's random state, the losses so far, and here the builder fingerprint and the
build's seconds so far. A build resumed from it gives the weights of a build never stopped.
"""

from __future__ import annotations

from pathlib import Path

import torch

from verl_masopd.tiny_world.weights import WeightsError

STATE = "state.pt"


def save_state(folder: Path, state: dict) -> None:
    """`state` into folder/state.pt through a temporary file renamed over it."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{STATE}.partial"
    torch.save(state, partial)
    partial.replace(folder / STATE)


def load_state(folder: Path, builder: str) -> dict | None:
    """The state in `folder` (None when there is none); a state that cannot be read or was written
    by another builder raises WeightsError naming the file."""
    path = folder / STATE
    if not path.is_file():
        return None
    try:
        state = torch.load(path, weights_only=True)
    except Exception as e:  # a damaged file: torch's zip reader raises several types
        reason = f"{type(e).__name__}: {e}"
        raise WeightsError(f"{path}: unreadable build state ({reason}); remove it to start afresh") from e
    if state.get("builder") != builder:
        raise WeightsError(
            f"{path}: a build state of builder {state.get('builder')}, but this code's builder is {builder}; "
            "remove it to start afresh"
        )
    return state
