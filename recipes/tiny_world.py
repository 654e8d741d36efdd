"""The tiny world of the recipes' CPU mode and the quickstart: shipped tiny models, generated problems.

    eval "$(python recipes/tiny_world.py --cache DIR --domain math)"

Prints shell `export` lines for the recipe's variables:
  STUDENT_MODEL        math: the shipped student (an early checkpoint of the teacher's pretraining);
                       code: the ~0.9M-parameter untrained tiny model (seed 0)
  TEACHER_MODEL        math: the shipped tiny teacher; code: the ~10M-parameter untrained tiny model
  TRAIN_FILES          math: the first --train problems of the tiny world's ladder; code: built-in problems
  VAL_FILES            the next --heldout problems, never seen in training
  MASOPD_PROMPT_STYLE  the workflow.prompt_style the models were built for (compact / paper)
Shipped models are checked against their manifest first (a mismatch stops with the file named and
the rebuild command). A variable already set in the environment wins: it is not printed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from data_prep.builtin import builtin_rows
from data_prep.writer import write_rows
from verl_masopd.tiny_models import cached_model
from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.weights import WeightsError

TINY_WORLD_DOMAINS = ("math",)


def builtin_data(folder: Path, domain: str, train: int, heldout: int) -> tuple[Path, Path]:
    """Built-in problems [0, train) and [train, train + heldout) of `domain` (data_prep.builtin)."""
    train_file = folder / f"{domain}_train{train}.parquet"
    heldout_file = folder / f"{domain}_heldout{heldout}_from{train}.parquet"
    rows = None
    for path, part in ((train_file, slice(0, train)), (heldout_file, slice(train, train + heldout))):
        if not path.exists():
            rows = rows or builtin_rows(domain, train + heldout)
            write_rows(rows[part], path)
    return train_file, heldout_file


def world_exports(cache: Path, domain: str, train: int, heldout: int) -> dict[str, str]:
    if domain in TINY_WORLD_DOMAINS:
        paths = world.models(domain)
        train_file, heldout_file = world.ensure_data(cache / "data", domain, train, heldout)
        return {
            "STUDENT_MODEL": paths["student"],
            "TEACHER_MODEL": paths["teacher"],
            "TRAIN_FILES": str(train_file),
            "VAL_FILES": str(heldout_file),
            "MASOPD_PROMPT_STYLE": world.PROMPT_STYLE,
        }
    train_file, heldout_file = builtin_data(cache / "data", domain, train, heldout)
    return {
        "STUDENT_MODEL": cached_model(cache / "models", size="tiny", seed=0),
        "TEACHER_MODEL": cached_model(cache / "models", size="small", seed=1),
        "TRAIN_FILES": str(train_file),
        "VAL_FILES": str(heldout_file),
        "MASOPD_PROMPT_STYLE": "paper",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="cache folder (data/ and models/ are made in it)")
    parser.add_argument("--domain", required=True, choices=("code", "math"))
    parser.add_argument("--train", type=int, default=512, help="training problems (default 512)")
    parser.add_argument("--heldout", type=int, default=400, help="held-out problems (default 400)")
    args = parser.parse_args(argv)
    try:
        exports = world_exports(Path(args.cache).resolve(), args.domain, args.train, args.heldout)
    except WeightsError as e:
        print(f"recipes/tiny_world.py: {e}", file=sys.stderr)
        return 1
    for name, value in exports.items():
        if not os.environ.get(name):
            print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
