"""CLI: `python -m verl_masopd.verify math PRED GOLD` prints `true` or `false`; so does
`python -m verl_masopd.verify em PRED GOLD [GOLD ...] [--mode em|subem|relaxed]`, true when
PRED matches any GOLD (verl_masopd/verify/qa_match.py).

Answers may start with "-" (`math -2,0,2 -2,0,2`): after the command, every word that is not
one of its options is an answer.
"""

from __future__ import annotations

import argparse
import sys

from verl_masopd.cli.args import positive_seconds
from verl_masopd.verify import math_equal
from verl_masopd.verify.equivalence import ANSWER_CHECK_TIMEOUT_S
from verl_masopd.verify.qa_match import MODES, answer_matches

# each command's options that take a value; -h/--help take none
VALUE_OPTIONS = {"math": ("--timeout",), "em": ("--mode",)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.verify")
    commands = parser.add_subparsers(dest="command", required=True)
    equal = commands.add_parser("math", help="are two math answers equivalent (math-verify)?")
    equal.add_argument("pred")
    equal.add_argument("gold")
    equal.add_argument("--timeout", type=positive_seconds, default=ANSWER_CHECK_TIMEOUT_S)
    em = commands.add_parser("em", help="does a short answer match any golden answer (QA exact match)?")
    em.add_argument("pred")
    em.add_argument("golds", nargs="+", metavar="gold")
    em.add_argument(
        "--mode", choices=MODES, default="em", help="em: exact match, subem: a gold in the answer, relaxed (default em)"
    )
    return parser


def answers_last(argv: list[str]) -> list[str]:
    """`argv` with the answers of `math` or `em` moved behind "--", so answers starting with "-"
    are not read as options."""
    if not argv or argv[0] not in VALUE_OPTIONS:
        return argv
    command, takes_value = argv[0], VALUE_OPTIONS[argv[0]]
    options, answers = [], []
    words = iter(argv[1:])
    for word in words:
        if word == "--":
            answers.extend(words)
        elif word in ("-h", "--help") or word.startswith(tuple(f"{option}=" for option in takes_value)):
            options.append(word)
        elif word in takes_value:
            options += [word, next(words, "")]
        else:
            answers.append(word)
    return [command, *options, "--", *answers]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(answers_last(sys.argv[1:] if argv is None else list(argv)))
    if args.command == "em":
        match = answer_matches(args.pred, args.golds, args.mode)
    else:
        match = math_equal(args.pred, args.gold, args.timeout)
    print("true" if match else "false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
