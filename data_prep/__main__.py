"""Command line: convert a dataset, check reference solutions, or write a built-in dataset.

python -m data_prep DATASET --input PATH --output OUT.parquet [--split SPLIT] [--limit N]
python -m data_prep check-solutions FILE.parquet [--limit N] [--timeout S] [--workers W] [--float-tol T]
python -m data_prep builtin --domain code|math --output OUT.parquet [--n N]
"""

from __future__ import annotations

import argparse
import sys

from data_prep.builtin import builtin_rows
from data_prep.convert import convert
from data_prep.errors import DataError
from data_prep.sources import SOURCES
from data_prep.writer import write_rows
from verl_masopd.cli_args import count, positive_seconds
from verl_masopd.verify.compare import DEFAULT_FLOAT_TOL


def _tolerance(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, source in SOURCES.items():
        sub = commands.add_parser(name, help=f"convert {name} release files to parquet")
        sub.add_argument("--input", required=True, help="release file or folder")
        sub.add_argument("--output", required=True, help="parquet file to write")
        sub.add_argument("--split", default=source.default_split, help=f"split (default {source.default_split})")
        sub.add_argument("--limit", type=count, help="keep at most N rows")
    check = commands.add_parser("check-solutions", help="run reference solutions against their tests")
    check.add_argument("file", help="parquet file written by data_prep")
    check.add_argument("--limit", type=count, help="check at most N problems")
    check.add_argument("--timeout", type=positive_seconds, default=10.0, help="seconds per test run (default 10)")
    check.add_argument("--workers", type=count, help="parallel test runs (default: the sandbox's)")
    check.add_argument(
        "--float-tol",
        type=_tolerance,
        default=DEFAULT_FLOAT_TOL,
        help=f"error accepted between numbers in outputs, as in the reward (default {DEFAULT_FLOAT_TOL:g})",
    )
    builtin = commands.add_parser("builtin", help="write a small synthetic dataset")
    builtin.add_argument("--domain", required=True, choices=("code", "math"))
    builtin.add_argument("--output", required=True, help="parquet file to write")
    builtin.add_argument("--n", type=count, default=64, help="number of problems (default 64)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check-solutions":
            from data_prep.check_solutions import check_solutions

            report = check_solutions(args.file, args.limit, args.timeout, args.workers, args.float_tol)
            print(report.format())
            return 1 if report.failures else 0
        elif args.command == "builtin":
            write_rows(builtin_rows(args.domain, args.n), args.output)
            print(f"builtin {args.domain}: wrote {args.n} problems to {args.output}")
        else:
            summary = convert(SOURCES[args.command], args.input, args.output, args.split, args.limit)
            print(summary.format())
            print(f"wrote {summary.kept} rows to {args.output}")
    except (DataError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
