"""CLI: `python -m verl_masopd.verify math PRED GOLD` prints `true` or `false`.

PRED and GOLD may start with "-" (`math -2,0,2 -2,0,2`): after `math`, every word that is not
one of its options is an answer.
"""

from __future__ import annotations

import argparse
import sys

from verl_masopd.cli_args import positive_seconds
from verl_masopd.verify import math_equal
from verl_masopd.verify.equivalence import ANSWER_CHECK_TIMEOUT_S

MATH_OPTIONS = ("-h", "--help", "--timeout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.verify")
    commands = parser.add_subparsers(dest="command", required=True)
    equal = commands.add_parser("math", help="are two math answers equivalent (math-verify)?")
    equal.add_argument("pred")
    equal.add_argument("gold")
    equal.add_argument("--timeout", type=positive_seconds, default=ANSWER_CHECK_TIMEOUT_S)
    return parser


def answers_last(argv: list[str]) -> list[str]:
    """`argv` with the answers of `math` moved behind "--", so answers starting with "-" are not
    read as options."""
    if not argv or argv[0] != "math":
        return argv
    options, answers = [], []
    words = iter(argv[1:])
    for word in words:
        if word == "--":
            answers.extend(words)
        elif word in MATH_OPTIONS or word.startswith("--timeout="):
            options.append(word)
            if word == "--timeout":
                options.append(next(words, ""))
        else:
            answers.append(word)
    return ["math", *options, "--", *answers]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(answers_last(sys.argv[1:] if argv is None else list(argv)))
    print("true" if math_equal(args.pred, args.gold, args.timeout) else "false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
