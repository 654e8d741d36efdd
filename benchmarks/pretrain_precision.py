"""The tiny world's pretraining step in bf16 autocast against float32 on this CPU: seconds of CPU
time per step (forward, backward, AdamW) of each search model size on the same demonstration
batches, one torch thread, so that a build's `--precision` is chosen by measurement.

    python benchmarks/pretrain_precision.py [--batches N] [--rounds N]

The search teacher's demonstrations (one length-bucketed draw of BUCKETED_BATCHES batches of 8);
per size and precision, each round trains on the first N batches in turn (after one warm-up
batch), the two precisions alternating round by round so that a change in the machine's load
falls on both; the median over rounds of the mean step time. Also whether the CPU has bf16
instructions (avx512_bf16 / amx_bf16 in /proc/cpuinfo). Writes
benchmarks/results/pretrain_precision.json.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import random
import statistics
import time
from pathlib import Path

import torch
from results_file import save_result

from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.models import build_tokenizer, new_model
from verl_masopd.tiny_world.pretrain import SIZES, length_buckets

SEARCH_SIZES = ("search", "search-deep")


def bf16_instructions() -> list[str]:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    return sorted({f for f in flags if f in ("avx512_bf16", "amx_bf16")})


def step_seconds(model, optimizer, batches, precision: str) -> float:
    """Mean CPU seconds of one training step over `batches`."""
    start = time.process_time()
    for batch in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext():
            loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return (time.process_time() - start) / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    draw, _ = recipe("search").draws(tokenizer)
    batches = length_buckets(tokenizer, draw, random.Random(0), 8)[: args.batches + 1]
    sizes = {}
    for size in SEARCH_SIZES:
        models = {p: new_model(tokenizer, SIZES[size], 0, max_positions=1024) for p in ("bf16", "fp32")}
        optimizers = {p: torch.optim.AdamW(m.parameters()) for p, m in models.items()}
        times = {p: [] for p in models}
        for p in models:
            step_seconds(models[p], optimizers[p], batches[:1], p)
        for _ in range(args.rounds):
            for p in models:
                times[p].append(step_seconds(models[p], optimizers[p], batches[1:], p))
        median = {p: statistics.median(t) for p, t in times.items()}
        sizes[size] = {
            "parameters": sum(x.numel() for x in models["fp32"].parameters()),
            "cpu_seconds_per_step": {p: round(s, 3) for p, s in median.items()},
            "bf16_over_fp32": round(median["bf16"] / median["fp32"], 2),
        }
    save_result(
        "pretrain_precision",
        {
            "batch": 8,
            "tokens_per_batch": [int(b["attention_mask"].sum()) for b in batches[1:]],
            "rounds": args.rounds,
            "cpu": platform.processor() or platform.machine(),
            "bf16_instructions": bf16_instructions(),
            "torch": torch.__version__,
            "sizes": sizes,
        },
    )


if __name__ == "__main__":
    main()
