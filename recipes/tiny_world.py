"""The tiny world of the recipes' CPU mode and the quickstart: shipped tiny models, generated problems.

    eval "$(python recipes/tiny_world.py --cache DIR --domain math|code|qa)"

Prints shell `export` lines for the recipe's variables:
  STUDENT_MODEL        the domain's shipped student (the teacher fine-tuned with a role confusion)
  TEACHER_MODEL        the domain's shipped tiny teacher
  TRAIN_FILES          the first --train problems of the domain's task family (math: the arithmetic
                       ladder; code: templated stdin problems; qa: the search world's one- and
                       two-hop questions)
  VAL_FILES            the next --heldout problems, never seen in training
  RETRIEVER            qa only: the BM25 index folder of the search world's corpus
  MASOPD_PROMPT_STYLE  the workflow.prompt_style the models were built for (compact)
  MASOPD_TINY_MODELS   1 when the student (STUDENT_MODEL as set, else the shipped one) has the tiny
                       models' byte-level tokenizer, else 0: the recipes then keep the tiny world's
                       preset for the tiny models and use preset=small_cpu for a model of your own
  MASOPD_TINY_TEACHER  only when TEACHER_MODEL is set: 1 when it has that tokenizer too, else 0
Shipped models are checked against their manifest first (a mismatch stops with the file named and
the rebuild command). A variable already set in the environment wins: it is not printed
(MASOPD_TINY_MODELS, which follows from the student, is always printed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from transformers import AutoTokenizer

from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.weights import WeightsError


def world_exports(cache: Path, domain: str, train: int, heldout: int) -> dict[str, str]:
    if domain == "qa":
        paths = world.models("search")
        data = world.ensure_search_data(cache / "data", train, heldout)
        return {
            "STUDENT_MODEL": paths["student"],
            "TEACHER_MODEL": paths["teacher"],
            "TRAIN_FILES": str(data["train"]),
            "VAL_FILES": str(data["heldout"]),
            "RETRIEVER": str(data["index"]),
            "MASOPD_PROMPT_STYLE": world.PROMPT_STYLE,
        }
    paths = world.models(domain)
    train_file, heldout_file = world.ensure_data(cache / "data", domain, train, heldout)
    return {
        "STUDENT_MODEL": paths["student"],
        "TEACHER_MODEL": paths["teacher"],
        "TRAIN_FILES": str(train_file),
        "VAL_FILES": str(heldout_file),
        "MASOPD_PROMPT_STYLE": world.PROMPT_STYLE,
    }


def tiny_student(student: str, shipped: str) -> bool:
    """Whether the folder `student` has the tokenizer of the shipped tiny student `shipped`."""
    if not os.path.isdir(student):
        return False
    return AutoTokenizer.from_pretrained(student).get_vocab() == AutoTokenizer.from_pretrained(shipped).get_vocab()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="cache folder (data/ and models/ are made in it)")
    parser.add_argument("--domain", required=True, choices=("code", "math", "qa"))
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
    tiny = tiny_student(os.environ.get("STUDENT_MODEL") or exports["STUDENT_MODEL"], exports["STUDENT_MODEL"])
    print(f"export MASOPD_TINY_MODELS={int(tiny)}")
    if os.environ.get("TEACHER_MODEL"):
        print(f"export MASOPD_TINY_TEACHER={int(tiny_student(os.environ['TEACHER_MODEL'], exports['STUDENT_MODEL']))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
