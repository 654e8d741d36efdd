"""Where a tool-calling rollout spends its time: generation against tools.

The single-agent math workflow on the tiny model (HF backend), with a retrieval tool over a BM25
index (verl_masopd.retrieval) of a generated 2,000-passage corpus: every reply stops at each "e"
the untrained model writes (a call, so that calls are frequent), the reply's last 40 characters
are the query, and the top 3 passages, rendered as `<information>…</information>` and clipped to
`--max-observation-tokens`, are appended. Reports the rollout's wall time, the time with a
generation in flight, the time outside generation (the tools, which run between generation
rounds, and the rollout's own work), the tools' call-seconds summed over calls (calls run in
parallel threads, so the sum can exceed their wall time), calls, observation tokens, outcomes.

    python benchmarks/tool_rollout_split.py [--problems 16] [--group 4] [--max-new-tokens 64]
Writes benchmarks/results/tool_rollout_split.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

from results_file import save_result
from rollout_overhead import InFlightClock

from verl_masopd.retrieval.index import BM25Index, build_index
from verl_masopd.retrieval.passages import render_observation
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.tiny_world.models import cached_model
from verl_masopd.workflows import workflow_class
from verl_masopd.workflows.problem import Problem
from verl_masopd.workflows.tools import Observation, Tool

WORDS = "river stone garden winter market engine letter silver forest harbor planet theory".split()


def corpus(path: Path, passages: int) -> None:
    rng = random.Random(0)
    with path.open("w") as f:
        for i in range(passages):
            text = " ".join(rng.choice(WORDS) for _ in range(60))
            f.write(json.dumps({"id": str(i), "contents": f'"Passage {i}"\n{text}'}) + "\n")


class Search(Tool):
    name = "search"
    stop = ("e",)

    def __init__(self, index: BM25Index, **kwargs):
        super().__init__(**kwargs)
        self.index = index

    def run(self, reply: str) -> Observation:
        [passages] = self.index.search([reply[-40:]], 3)
        return Observation(f"<information>{render_observation(passages)}</information>")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-calls", type=int, default=3)
    parser.add_argument("--max-observation-tokens", type=int, default=24)
    args = parser.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    with tempfile.TemporaryDirectory() as tmp:
        corpus(Path(tmp) / "corpus.jsonl", 2000)
        build_index(Path(tmp) / "corpus.jsonl", Path(tmp) / "index")
        tool = Search(
            BM25Index(Path(tmp) / "index"), max_calls=args.max_calls, max_observation_tokens=args.max_observation_tokens
        )

        class Searching(workflow_class("sa", "math")):
            def tool(self, agent):
                return tool

        clock = InFlightClock(HFBackend(cached_model(cache, size="tiny", seed=0)))
        problems = [
            Problem(uid=f"m{i}", domain="math", statement=f"What is {i} + 1?", answer=str(i + 1))
            for i in range(args.problems)
        ]
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens)
        with RolloutManager(Searching(horizon=1), {"reasoner": clock}, clock.backend.tokenizer, sampling=sampling) as m:
            start = time.perf_counter()
            asyncio.run(m.run(problems, group_size=args.group))
            wall = time.perf_counter() - start
    metrics = m.metrics
    save_result(
        "tool_rollout_split",
        {
            "settings": vars(args),
            "episodes": metrics.episodes,
            "wall_s": round(wall, 3),
            "generation_s": round(clock.busy_s, 3),
            "outside_generation_s": round(wall - clock.busy_s, 3),
            "tool_call_seconds_summed": round(metrics.tool_seconds, 3),
            "generation_share": round(clock.busy_s / wall, 4),
            "tool_calls": metrics.tool_calls,
            "observation_tokens": metrics.observation_tokens,
            "outcomes": dict(metrics.tool_outcomes),
            "generation_calls": metrics.generation_calls,
        },
    )


if __name__ == "__main__":
    main()
