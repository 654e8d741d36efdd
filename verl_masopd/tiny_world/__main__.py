"""The tiny world's command line.

    python -m verl_masopd.tiny_world build --domain math [--out DIR] [--snapshots DIR --snapshot-every N]
        [--state DIR --state-every N] [--teacher-steps N] [--size NAME] [--precision P]
    python -m verl_masopd.tiny_world check --domain math
    python -m verl_masopd.tiny_world search-data --out DIR --train N --heldout N [--validation N] [--no-index]

`build` pretrains the domain's teacher and student (pretrain.py) and writes them with their
manifest into the shipped weights folder (or --out), through a temporary folder renamed into place.
With --state DIR the build writes its state there every --state-every teacher steps
(pretrain_state.py) and, started again with the same DIR, resumes from it: a build longer than a
session spans sessions with the weights of one uninterrupted build. --teacher-steps, --size and
--precision build a variant of the domain's recipe (builder.recipe): its own fingerprint and
rebuild command in its manifest, so it goes to --out beside the shipped weights. `check` verifies
shipped weights against their manifest and this code's builder.
`search-data` writes the search world (search_kb.py, search_tasks.py) into DIR: corpus.jsonl,
train.parquet, heldout.parquet, validation.parquet (with --validation) and the BM25 index in
index/ (unless --no-index).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from verl_masopd.files.install import install
from verl_masopd.tiny_world.builder import RECIPES, recipe
from verl_masopd.tiny_world.models import build_tokenizer
from verl_masopd.tiny_world.pretrain import BUCKETED_BATCHES, PRECISIONS, SIZES, pretrain
from verl_masopd.tiny_world.pretrain_state import load_state, save_state
from verl_masopd.tiny_world.search_tasks import write_search_data
from verl_masopd.tiny_world.weights import (
    WEIGHTS,
    WeightsError,
    rebuild_command,
    verified_models,
    write_manifest,
)


def build(
    domain: str,
    out: Path,
    snapshots: Path | None = None,
    snapshot_every: int = 0,
    state: Path | None = None,
    state_every: int = 0,
    teacher_steps: int | None = None,
    size: str | None = None,
    precision: str | None = None,
) -> dict:
    r = recipe(domain, teacher_steps, size, precision)
    chosen = {"--teacher-steps": teacher_steps, "--size": size, "--precision": precision}
    options = "".join(f" {option} {value}" for option, value in chosen.items() if value is not None)
    tokenizer = build_tokenizer()
    builder = r.fingerprint(tokenizer)
    resume = load_state(state, builder) if state else None
    earlier = resume["seconds"] if resume else 0.0
    target = out / domain
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{domain}-build-", dir=target.parent))
    steps = {}

    def save(name: str, model, step: int) -> None:
        folder = staging / name if name in ("student", "teacher") else snapshots / name
        model.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
        steps[name] = step

    def keep_state(run_state: dict) -> None:
        save_state(state, {**run_state, "builder": builder, "seconds": earlier + time.perf_counter() - start})

    start = time.perf_counter()
    losses = pretrain(
        tokenizer,
        *r.draws(tokenizer),
        r.schedule,
        r.seed,
        save,
        r.size,
        snapshot_every if snapshots else 0,
        keep_state if state else None,
        state_every if state else 0,
        resume,
    )
    record = {
        "builder": builder,
        "command": rebuild_command(domain, options),
        "domain": domain,
        "seed": r.seed,
        "steps": {"student": steps["student"], "teacher": steps["teacher"]},
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "build_seconds": round(earlier + time.perf_counter() - start, 1),
    }
    write_manifest(staging, record)
    install(staging, target)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_masopd.tiny_world", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="pretrain a domain's teacher and student")
    build_parser.add_argument("--domain", required=True, choices=sorted(RECIPES))
    build_parser.add_argument("--out", type=Path, default=WEIGHTS, help=f"weights root (default {WEIGHTS})")
    build_parser.add_argument("--snapshots", type=Path, help="also save the model every --snapshot-every steps here")
    build_parser.add_argument("--snapshot-every", type=int, default=100)
    build_parser.add_argument("--state", type=Path, help="keep the build's state here and resume from it")
    build_parser.add_argument(
        "--state-every", type=int, default=200, help=f"teacher steps between states (a multiple of {BUCKETED_BATCHES})"
    )
    build_parser.add_argument("--teacher-steps", type=int, help="the teacher's steps (default: the recipe's)")
    build_parser.add_argument("--size", choices=sorted(SIZES), help="the model size (default: the recipe's)")
    build_parser.add_argument("--precision", choices=PRECISIONS, help="training precision (default: the recipe's)")
    check_parser = commands.add_parser("check", help="verify shipped weights against their manifest")
    check_parser.add_argument("--domain", required=True, choices=sorted(RECIPES))
    search_parser = commands.add_parser("search-data", help="write the search world's corpus, questions and index")
    search_parser.add_argument("--out", type=Path, required=True, help="output folder")
    search_parser.add_argument("--train", type=int, required=True, help="training questions [0, N)")
    search_parser.add_argument("--heldout", type=int, required=True, help="held-out questions from HELDOUT_START")
    search_parser.add_argument("--validation", type=int, default=0, help="validation questions from VALIDATION_START")
    search_parser.add_argument("--no-index", action="store_true", help="do not build the BM25 index")
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.state_every <= 0 or args.state_every % BUCKETED_BATCHES:
            parser.error(f"--state-every must be a positive multiple of {BUCKETED_BATCHES}, got {args.state_every}")
        warmup = recipe(args.domain).schedule.warmup
        if args.teacher_steps is not None and args.teacher_steps <= warmup:
            parser.error(f"--teacher-steps must exceed the {warmup} warm-up steps, got {args.teacher_steps}")
        try:
            record = build(
                args.domain,
                args.out,
                args.snapshots,
                args.snapshot_every,
                args.state,
                args.state_every,
                args.teacher_steps,
                args.size,
                args.precision,
            )
        except WeightsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps(record, indent=2))
        return 0
    if args.command == "search-data":
        try:
            written = write_search_data(args.out, args.train, args.heldout, args.validation, index=not args.no_index)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(json.dumps(written, indent=2))
        return 0
    try:
        paths = verified_models(args.domain, recipe(args.domain).fingerprint())
    except WeightsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(paths, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
