"""Finding the evaluations and training logs of a RUNS folder (layout in the package docstring)."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from verl_masopd.eval.settings import SETTINGS_FILE

EVAL, EVAL_SWAP, TRAIN = "eval", "eval-swap", "train"
SEED_DIR = re.compile(r"seed(\d+)")
EVENT_FILES = "events.out.tfevents.*"


@dataclass(frozen=True)
class Evaluation:
    """One evaluation's summary row and settings."""

    method: str
    seed: int
    benchmark: str
    swapped: bool
    path: Path
    summary: dict
    settings: dict

    @property
    def domain(self) -> str:
        return self.settings["domain"]

    @property
    def name(self) -> str:
        """method/seed<k>/eval[-swap]/benchmark: how messages name it."""
        return f"{self.method}/seed{self.seed}/{EVAL_SWAP if self.swapped else EVAL}/{self.benchmark}"


def seed_dirs(runs: Path, methods: list[str] | None = None) -> list[tuple[str, int, Path]]:
    """(method, seed, folder) of every RUNS/<method>/seed<k> (of `methods` only, when given), by
    method then seed."""
    if not runs.is_dir():
        raise ValueError(f"--runs {runs}: not a folder")
    found = []
    for method in sorted(p for p in runs.iterdir() if p.is_dir() and (not methods or p.name in methods)):
        for folder in method.iterdir():
            match = SEED_DIR.fullmatch(folder.name)
            if match and folder.is_dir():
                found.append((method.name, int(match.group(1)), folder))
    return sorted(found, key=lambda item: (item[0], item[1]))


def find_evaluations(runs: Path, methods: list[str] | None = None) -> list[Evaluation]:
    """The evaluations under RUNS (of `methods` only, when given); other methods' folders are not read."""
    evaluations = []
    for method, seed, folder in seed_dirs(runs, methods):
        for kind in (EVAL, EVAL_SWAP):
            for bench in sorted(p for p in (folder / kind).glob("*") if p.is_dir()):
                evaluations.append(read_evaluation(method, seed, bench, kind == EVAL_SWAP))
    if not evaluations:
        raise ValueError(f"--runs {runs}: no evaluations under <method>/seed<k>/eval/<benchmark>/")
    return evaluations


def read_evaluation(method: str, seed: int, folder: Path, swapped: bool) -> Evaluation:
    summary_file, settings_file = folder / "summary.csv", folder / SETTINGS_FILE
    for path in (summary_file, settings_file):
        if not path.is_file():
            raise ValueError(f"{path}: missing (write it with this version of python -m verl_masopd.eval)")
    with open(summary_file, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise ValueError(f"{summary_file}: expected one row, found {len(rows)}")
    settings = json.loads(settings_file.read_text())
    if bool(settings.get("swap_roles")) != swapped:
        raise ValueError(f"{settings_file}: swap_roles={settings.get('swap_roles')} in an {folder.parent.name}/ folder")
    summary = {key: _number(value) for key, value in rows[0].items()}
    return Evaluation(method, seed, folder.name, swapped, folder, summary, settings)


def find_event_files(runs: Path, methods: list[str] | None = None) -> dict[tuple[str, str, int], list[Path]]:
    """{(domain, method, seed): TensorBoard event files under RUNS/<method>/seed<k>/train/<domain>/}
    (of `methods` only, when given)."""
    found = {}
    for method, seed, folder in seed_dirs(runs, methods):
        for domain_dir in sorted(p for p in (folder / TRAIN).glob("*") if p.is_dir()):
            files = sorted(domain_dir.rglob(EVENT_FILES))
            if files:
                found[(domain_dir.name, method, seed)] = files
    return found


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def is_number(value) -> bool:
    return isinstance(value, float) and not math.isnan(value)
