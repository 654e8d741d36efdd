"""Training curves from TensorBoard event files (tensorboard's EventAccumulator, a verl dependency).

A run's curve is {step: value} of one scalar tag; where a step was logged more than once (a
resumed run), the latest write wins. Over seeds, at each step: mean and sample std of the seeds
that logged it (std None with one seed).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from verl_masopd.report.stats import cell


def read_scalar(files: list[Path], tag: str) -> dict[int, float]:
    """{step: value} of `tag` over `files` (empty when no file has it)."""
    events = []
    for path in files:
        accumulator = EventAccumulator(str(path), size_guidance={SCALARS: 0})
        accumulator.Reload()
        if tag in accumulator.Tags()[SCALARS]:
            events += accumulator.Scalars(tag)
    return {e.step: e.value for e in sorted(events, key=lambda e: e.wall_time)}


def method_curves(
    event_files: dict[tuple[str, str, int], list[Path]], tag: str
) -> dict[str, dict[str, dict[str, list]]]:
    """{domain: {method: {"steps", "mean", "std", "seeds"}}} of `tag`, for the runs that logged it."""
    runs: dict[tuple[str, str], dict[int, dict[int, float]]] = defaultdict(dict)
    for (domain, method, seed), files in sorted(event_files.items()):
        curve = read_scalar(files, tag)
        if curve:
            runs[(domain, method)][seed] = curve
    out: dict[str, dict[str, dict[str, list]]] = defaultdict(dict)
    for (domain, method), seeds in runs.items():
        steps = sorted({step for curve in seeds.values() for step in curve})
        cells = [cell([curve[step] for curve in seeds.values() if step in curve]) for step in steps]
        out[domain][method] = {
            "steps": steps,
            "mean": [c.mean for c in cells],
            "std": [c.std for c in cells],
            "seeds": sorted(seeds),
        }
    return dict(out)
