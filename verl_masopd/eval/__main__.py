"""Evaluate frozen policies on a parquet file of problems.

  python -m verl_masopd.eval --data X.parquet --model PATH [--role-model coder=PATH ...]
      --workflow mas|sa --horizon 4 --k 1 --out DIR

Models are HF checkpoints given by path (every role uses --model unless --role-model names
another; the tokenizer is --model's). Sampling defaults are METHOD.md's evaluation settings
(temperature 0.6, top-p 0.95, top-k 20, horizon 4); SA+ST is `--workflow sa --horizon 1`.
Writes DIR/records.jsonl (one line per problem), DIR/summary.md and DIR/summary.csv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from verl_masopd.eval.runner import evaluate
from verl_masopd.eval.summary import summarize, write_summary
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_masopd.eval", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="parquet file in the project's row schema")
    p.add_argument("--model", required=True, help="HF checkpoint path used by every role (and its tokenizer)")
    p.add_argument(
        "--role-model",
        action="append",
        default=[],
        metavar="ROLE=PATH",
        help="another checkpoint for one role (repeatable)",
    )
    p.add_argument("--workflow", choices=("mas", "sa"), default="mas")
    p.add_argument("--horizon", type=int, default=4)
    p.add_argument("--agents-per-role", type=int, default=1)
    p.add_argument(
        "--context-layout",
        choices=("role_first", "role_last"),
        default="role_first",
        help="where the role instruction goes; use the layout the model was trained with (workflow.context_layout)",
    )
    p.add_argument("--k", type=int, default=1, help="episodes per problem")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=32, help="problems played at once")
    p.add_argument("--limit", type=int, help="evaluate the first N problems only")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output directory")
    return p


def load_problems(path: str, limit: int | None) -> list[Problem]:
    rows = pd.read_parquet(path).to_dict("records")[:limit]
    if not rows:
        raise ValueError(f"{path}: no rows")
    problems = []
    for i, row in enumerate(rows):
        try:
            problems.append(Problem.from_row(row))
        except ValueError as e:
            raise ValueError(f"{path} row {i}: {e}") from None
    domains = {p.domain for p in problems}
    if len(domains) > 1:
        raise ValueError(f"{path}: mixed domains {sorted(domains)}; evaluate one domain per file")
    return problems


def role_paths(workflow, default: str, overrides: list[str]) -> dict[str, str]:
    paths = dict.fromkeys(workflow.roles, default)
    for item in overrides:
        role, sep, path = item.partition("=")
        if not sep or role not in paths:
            raise ValueError(f"--role-model {item!r}: expected ROLE=PATH with ROLE one of {list(workflow.roles)}")
        paths[role] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        problems = load_problems(args.data, args.limit)
        workflow = make_workflow(args.workflow, problems[0].domain, args.agents_per_role, args.horizon)
        paths = role_paths(workflow, args.model, args.role_model)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    loaded = {
        path: HFBackend(path, dtype=dtype, seed=args.seed) for path in dict.fromkeys([args.model, *paths.values()])
    }
    backends = {role: loaded[path] for role, path in paths.items()}
    sampling = SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (
        RolloutManager(
            workflow,
            backends,
            loaded[args.model].tokenizer,
            policy_sharing="role",
            sampling=sampling,
            context_layout=args.context_layout,
        ) as manager,
        tqdm(total=len(problems) * args.k, unit="episode") as bar,
    ):
        records = asyncio.run(evaluate(manager, problems, args.k, args.batch_size, lambda _: bar.update()))
    with open(out / "records.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record, default=str) + "\n")
    summary = summarize(records, args.horizon)
    summary.update({f"rollout/{k}": v for k, v in manager.metrics.as_dict().items()})
    write_summary(summary, out)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
