"""The files a run on the tiny world uses: the verified shipped models and the train / held-out
parquet files of a domain (the search world's also its corpus and BM25 index), and the held-out
accuracy per ladder level of an evaluation.

Training problems are [0, train) of the task family, held-out problems
[HELDOUT_START, HELDOUT_START + heldout), validation problems (`ensure_validation_data`, for
choosing settings without touching the held-out ones) [VALIDATION_START, VALIDATION_START + n):
disjoint index ranges. The search world's models are
`models("search")`, its questions the `qa` domain's.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from data_prep.writer import write_rows
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.code_tasks import code_rows
from verl_masopd.tiny_world.math_tasks import HELDOUT_START, VALIDATION_START, math_rows
from verl_masopd.tiny_world.search_tasks import write_search_data
from verl_masopd.tiny_world.weights import verified_models

PROMPT_STYLE = "compact"


def task_rows(domain: str, start: int, count: int, split: str) -> list[dict]:
    if domain == "math":
        return math_rows(start, count, split)
    if domain == "code":
        return code_rows(start, count, split)
    raise ValueError(f"no tiny-world task family for domain {domain!r}")


def ensure_data(folder: Path, domain: str, train: int, heldout: int) -> tuple[Path, Path]:
    """`tiny_<domain>_train<train>.parquet` and `tiny_<domain>_heldout<heldout>.parquet` under `folder`."""
    files = (
        (folder / f"tiny_{domain}_train{train}.parquet", 0, train, "train"),
        (folder / f"tiny_{domain}_heldout{heldout}.parquet", HELDOUT_START, heldout, "test"),
    )
    for path, start, count, split in files:
        if not path.exists():
            write_rows(task_rows(domain, start, count, split), path)
    return files[0][0], files[1][0]


def ensure_validation_data(folder: Path, domain: str, count: int) -> Path:
    """`tiny_<domain>_validation<count>.parquet` under `folder`."""
    path = folder / f"tiny_{domain}_validation{count}.parquet"
    if not path.exists():
        write_rows(task_rows(domain, VALIDATION_START, count, "validation"), path)
    return path


def ensure_search_data(folder: Path, train: int, heldout: int) -> dict[str, Path]:
    """The search world under `folder / f"search_train{train}_heldout{heldout}"`: "train" and
    "heldout" parquet files and the BM25 "index" folder (search_tasks.write_search_data)."""
    out = folder / f"search_train{train}_heldout{heldout}"
    paths = {"train": out / "train.parquet", "heldout": out / "heldout.parquet", "index": out / "index"}
    if not all(path.exists() for path in paths.values()):
        write_search_data(out, train, heldout, index=True)
    return paths


def models(domain: str) -> dict[str, str]:
    """{"student": path, "teacher": path}, checked against the manifest (weights.WeightsError if not)."""
    return verified_models(domain, recipe(domain).fingerprint())


def accuracy_by_source(records_path: Path) -> dict[str, dict]:
    """Per data source (the ladder level) and "all": episodes n, accuracy p and its standard error
    sqrt(p (1 − p) / n), from an evaluation's records.jsonl."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for line in Path(records_path).read_text().splitlines():
        record = json.loads(line)
        for episode in record["episodes"]:
            outcomes[record["data_source"]].append(bool(episode["correct"]))
            outcomes["all"].append(bool(episode["correct"]))
    table = {}
    for source in sorted(outcomes):
        values = outcomes[source]
        p = sum(values) / len(values)
        table[source] = {"n": len(values), "accuracy": p, "se": math.sqrt(p * (1 - p) / len(values))}
    return table
