"""CLI of the retrieval package.

`python -m verl_masopd.retrieval index --corpus FILE --out DIR` builds the BM25 index of a corpus
JSONL (kept as it is when DIR already holds the index of the same corpus bytes) and prints a JSON
summary. `python -m verl_masopd.retrieval search --index DIR --topk K QUERY...` prints the
passages as JSON, in the layout of the server's response. `python -m verl_masopd.retrieval serve
--index DIR --port P` serves the index over HTTP and prints its URL once listening.
A bad corpus line, a folder that is not an index, or a port that cannot be bound ends with one line
on stderr naming the culprit, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from verl_masopd.cli.args import count
from verl_masopd.retrieval.api import response_body
from verl_masopd.retrieval.corpus import CorpusError
from verl_masopd.retrieval.index import BM25Index, NotAnIndex, build_index
from verl_masopd.retrieval.server import DEFAULT_TOPK, RetrievalServer


class UsageError(Exception):
    """An output folder or a port the command cannot use."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verl_masopd.retrieval")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    index = commands.add_parser("index", help="build the BM25 index of a corpus JSONL")
    index.add_argument("--corpus", required=True, help='JSONL, one {"id", "contents"} per line')
    index.add_argument("--out", required=True, help="the index folder")
    search = commands.add_parser("search", help="print the best passages of each query as JSON")
    search.add_argument("--index", required=True, help="an index folder")
    search.add_argument("--topk", type=count, default=DEFAULT_TOPK)
    search.add_argument("queries", nargs="+", metavar="QUERY")
    serve = commands.add_parser("serve", help="serve an index over HTTP (POST /retrieve)")
    serve.add_argument("--index", required=True, help="an index folder")
    serve.add_argument("--port", type=_port, required=True, help="0 picks a free port")
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 serves every interface")
    serve.add_argument("--topk", type=count, default=DEFAULT_TOPK, help="for requests that give none")
    return parser


def _index(args) -> None:
    started = time.perf_counter()
    try:
        built = build_index(args.corpus, args.out)
    except OSError as error:
        raise UsageError(f"--out {args.out}: {error.strerror or error}") from None
    summary = {"index": args.out, "passages": len(BM25Index(args.out)), "built": built}
    print(json.dumps({**summary, "seconds": round(time.perf_counter() - started, 3)}))


def _serve(args) -> None:
    index = BM25Index(args.index)
    try:
        server = RetrievalServer(index, host=args.host, port=args.port, default_topk=args.topk)
    except OSError as error:
        raise UsageError(f"--host {args.host} --port {args.port}: {error.strerror or error}") from None
    print(server.url, flush=True)
    server.run()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "index":
            _index(args)
        elif args.command == "search":
            print(json.dumps(response_body(BM25Index(args.index).search(args.queries, args.topk))))
        else:
            _serve(args)
    except (CorpusError, NotAnIndex, UsageError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
