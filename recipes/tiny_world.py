"""The tiny offline world of the recipes' CPU mode: tiny student and teacher, built-in data.

    eval "$(python recipes/tiny_world.py --cache DIR --domain math)"

Builds, once per cache folder (idempotent; the models are rebuilt only when their builder
changes), and prints shell `export` lines for the recipe's variables:
  STUDENT_MODEL  the ~0.9M-parameter Qwen3 student (seed 0)
  TEACHER_MODEL  the ~10M-parameter Qwen3 teacher (seed 1) with the student's tokenizer
  TRAIN_FILES    the first --train built-in problems of --domain
  VAL_FILES      the next --heldout built-in problems, never seen in training
A variable already set in the environment wins: nothing is built for it and it is not printed.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from data_prep.builtin import builtin_rows
from data_prep.writer import write_rows
from verl_masopd.tiny_models import cached_model


def ensure_data(folder: Path, domain: str, train: int, heldout: int) -> tuple[Path, Path]:
    """`<domain>_train<train>.parquet` and `<domain>_heldout<heldout>_from<train>.parquet` under `folder`.

    Built-in problem i depends only on i, so problems [0, train) train and [train, train + heldout)
    are held out.
    """
    train_file = folder / f"{domain}_train{train}.parquet"
    heldout_file = folder / f"{domain}_heldout{heldout}_from{train}.parquet"
    rows = None
    for path, part in ((train_file, slice(0, train)), (heldout_file, slice(train, train + heldout))):
        if not path.exists():
            rows = rows or builtin_rows(domain, train + heldout)
            write_rows(rows[part], path)
    return train_file, heldout_file


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="cache folder (models/ and data/ are made in it)")
    parser.add_argument("--domain", required=True, choices=("code", "math"))
    parser.add_argument("--train", type=int, default=16, help="training problems (default 16)")
    parser.add_argument("--heldout", type=int, default=8, help="held-out problems (default 8)")
    args = parser.parse_args(argv)
    cache = Path(args.cache).resolve()
    builders = {
        "STUDENT_MODEL": lambda: cached_model(cache / "models", size="tiny", seed=0),
        "TEACHER_MODEL": lambda: cached_model(cache / "models", size="small", seed=1),
    }
    exports = {name: build() for name, build in builders.items() if not os.environ.get(name)}
    if not (os.environ.get("TRAIN_FILES") and os.environ.get("VAL_FILES")):
        train_file, heldout_file = ensure_data(cache / "data", args.domain, args.train, args.heldout)
        exports.update(
            {
                name: str(path)
                for name, path in (("TRAIN_FILES", train_file), ("VAL_FILES", heldout_file))
                if not os.environ.get(name)
            }
        )
    for name, value in exports.items():
        print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
