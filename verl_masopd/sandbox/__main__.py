"""CLI of the sandbox.

`python -m verl_masopd.sandbox run --timeout SECONDS FILE` reads stdin, runs FILE, prints the outcome as JSON.
`python -m verl_masopd.sandbox protections` prints what isolation this host gives runs, as JSON.
A bad argument (a timeout that is not a number of seconds above 0 and at most a day) or an
unreadable FILE ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from verl_masopd.sandbox import isolation, run_program
from verl_masopd.sandbox.limits import MAX_SECONDS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number of seconds, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds (one day), got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m verl_masopd.sandbox")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="run FILE on this process's stdin")
    run.add_argument("--timeout", type=_timeout, default=10.0, help="wall-clock limit in seconds")
    run.add_argument("file", help="Python program to run")
    commands.add_parser("protections", help="print the isolation runs get on this host")
    args = parser.parse_args(argv)
    if args.command == "protections":
        setup = isolation()
        print(json.dumps({"protections": setup.protections, "warnings": setup.warnings}))
        return 0
    try:
        with open(args.file, encoding="utf-8", errors="surrogateescape") as handle:
            code = handle.read()
    except OSError as error:
        parser.error(f"cannot read {args.file}: {error.strerror or error}")
    result = run_program(code, sys.stdin.read(), timeout=args.timeout)
    print(json.dumps({**dataclasses.asdict(result), "ok": result.ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
