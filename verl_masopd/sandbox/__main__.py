"""CLI: `python -m verl_masopd.sandbox run --timeout SECONDS FILE` reads stdin, prints the outcome as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from verl_masopd.sandbox import run_program


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.sandbox")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run FILE on this process's stdin")
    run.add_argument("--timeout", type=float, default=10.0, help="wall-clock limit in seconds")
    run.add_argument("file", help="Python program to run")
    args = parser.parse_args(argv)
    with open(args.file, encoding="utf-8", errors="surrogateescape") as handle:
        code = handle.read()
    result = run_program(code, sys.stdin.read(), timeout=args.timeout)
    print(json.dumps({**dataclasses.asdict(result), "ok": result.ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
