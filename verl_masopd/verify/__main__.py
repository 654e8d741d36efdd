"""CLI: `python -m verl_masopd.verify math PRED GOLD` prints `true` or `false`."""

from __future__ import annotations

import argparse
import sys

from verl_masopd.verify import math_equal
from verl_masopd.verify.equivalence import ANSWER_CHECK_TIMEOUT_S


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.verify")
    commands = parser.add_subparsers(dest="command", required=True)
    equal = commands.add_parser("math", help="are two math answers equivalent (math-verify)?")
    equal.add_argument("pred")
    equal.add_argument("gold")
    equal.add_argument("--timeout", type=float, default=ANSWER_CHECK_TIMEOUT_S)
    args = parser.parse_args(argv)
    print("true" if math_equal(args.pred, args.gold, args.timeout) else "false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
