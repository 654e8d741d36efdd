"""Command line: convert a dataset, check reference solutions, write a built-in dataset, build
the QA training mix or a passage corpus.

python -m data_prep DATASET --input PATH --output OUT.parquet [--split SPLIT] [--limit N]
python -m data_prep check-solutions FILE.parquet [--limit N] [--timeout S] [--workers W] [--float-tol T]
python -m data_prep builtin --domain code|math --output OUT.parquet [--n N]
python -m data_prep qa_train_mix --nq FILE --hotpotqa FILE --exclude TEST.parquet [...] --output OUT.parquet
python -m data_prep corpus --wiki18 FILE | --questions FILE [FILE ...] --output OUT.jsonl
"""

from __future__ import annotations

import argparse
import sys

from data_prep.builtin import builtin_rows
from data_prep.convert import convert
from data_prep.corpus import corpus_from_questions, normalise_wiki18
from data_prep.errors import DataError
from data_prep.qa_mix import train_mix
from data_prep.sources import SOURCES
from data_prep.writer import write_rows
from verl_masopd.cli.args import count, positive_seconds
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
    mix = commands.add_parser("qa_train_mix", help="NQ + HotpotQA training rows without the test questions")
    mix.add_argument("--nq", required=True, help="NQ train release file (or FlashRAG folder)")
    mix.add_argument("--hotpotqa", required=True, help="HotpotQA train release file (or FlashRAG folder)")
    mix.add_argument("--exclude", required=True, nargs="+", help="test parquet files whose questions are removed")
    mix.add_argument("--output", required=True, help="parquet file to write")
    corpus = commands.add_parser("corpus", help="a passage corpus in wiki-18's layout (JSONL)")
    given = corpus.add_mutually_exclusive_group(required=True)
    given.add_argument("--wiki18", help="wiki-18 JSONL {id, contents} to normalise")
    given.add_argument("--questions", nargs="+", help="HotpotQA / 2WikiMultihopQA / MuSiQue files: their paragraphs")
    corpus.add_argument("--output", required=True, help="JSONL file to write")
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
        elif args.command == "qa_train_mix":
            summary = train_mix(args.nq, args.hotpotqa, args.exclude, args.output)
            print(summary.format())
            print(f"wrote {summary.written} rows to {args.output}")
        elif args.command == "corpus":
            if args.wiki18:
                summary = normalise_wiki18(args.wiki18, args.output)
            else:
                summary = corpus_from_questions(args.questions, args.output)
            print(summary.format())
            print(f"wrote {summary.written} passages to {args.output}")
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
