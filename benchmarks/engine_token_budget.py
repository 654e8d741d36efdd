"""Peak memory and time of one log-prob pass of SmolLM2-135M-Instruct (vocabulary 49,152) in the
project's engine, by `engines.max_tokens_per_micro_batch`.

    python -m verl_masopd.models fetch smollm2-135m-instruct --out DIR
    VERL_PLATFORM=cpu python benchmarks/engine_token_budget.py --model DIR [--budgets 16384,2048]

For each budget a process of its own builds a forward-only local engine (float32) and scores
--rows responses of --response tokens after contexts of --context tokens (the policy's log-prob
pass and the teacher's scoring are this call); it reports its peak resident memory (getrusage),
its memory after the build and the pass's seconds. Expected from the logits alone: tokens in one
pass × 49,152 × 4 bytes per float32 copy. Writes benchmarks/results/engine_token_budget.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from results_file import save_result  # noqa: E402

GIB = 2**30


def child(args) -> None:
    """One measurement (run in a process of its own); prints its JSON."""
    import torch

    from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
    from verl_masopd.teacher.engine_scorer import scoring_batch
    from verl_masopd.teacher.scoring import ScoreRequest

    torch.manual_seed(0)
    settings = EngineSettings(
        model_path=args.model, forward_only=True, dtype="float32", max_tokens_per_micro_batch=args.child_budget
    )
    engine = PolicyEngine.local(settings)
    built_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ids = torch.randint(100, 49_000, (args.rows, args.context + args.response)).tolist()
    requests = [ScoreRequest(row[: args.context], row[args.context :]) for row in ids]
    start = time.perf_counter()
    log_probs = engine.infer_batch(scoring_batch(requests, pad_id=2))
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "budget_tokens": args.child_budget,
                "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                "rss_after_build_gib": round(built_kib / 2**20, 2),
                "pass_s": round(seconds, 1),
                "scored_tokens": int(log_probs.ne(0).sum()),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the fetched SmolLM2 folder")
    parser.add_argument("--budgets", default="16384,2048")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--context", type=int, default=896)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--child-budget", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_budget:
        child(args)
        return
    runs = {}
    for budget in [int(b) for b in args.budgets.split(",") if b]:
        command = [sys.executable, __file__, "--model", args.model, "--child-budget", str(budget)]
        command += ["--rows", str(args.rows), "--context", str(args.context), "--response", str(args.response)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        runs[str(budget)] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"budget {budget}: {runs[str(budget)]}", flush=True)
    tokens = args.rows * (args.context + args.response)
    report = {
        "setup": {
            "model": "SmolLM2-135M-Instruct (python -m verl_masopd.models), float32, forward-only local engine",
            "rows": args.rows,
            "context_tokens": args.context,
            "response_tokens": args.response,
            "tokens": tokens,
            "logits_gib_per_copy_in_one_pass": round(tokens * 49_152 * 4 / GIB, 2),
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "measured": runs,
    }
    save_result("engine_token_budget", report)


if __name__ == "__main__":
    main()
