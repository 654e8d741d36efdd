"""Rollout orchestration overhead.

1. Episodes/s of the real two-role math workflow driven by a constant-time stand-in generator
   (canned answers that disagree, so every episode runs to the horizon): the manager's own
   cost plus the workflow's steps, with generation reduced to a fixed latency.
2. The HF backend on the tiny model: the share of wall time during which no generation is in
   flight (rendering, encoding, decoding, parsing, stepping, judging). Target: < 10%.

    python benchmarks/rollout_overhead.py [--problems 16] [--group 4]
Writes benchmarks/results/rollout_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from pathlib import Path

from results_file import save_result

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import episodes_of
from verl_masopd.tiny_world.models import cached_model
from verl_masopd.workflows import make_workflow
from verl_masopd.workflows.problem import Problem

# "program": the Tool-User's program runs in the sandbox every turn; "no_program": nothing to run,
# so the measurement is the manager and the workflow's pure-Python work alone.
CANNED = {
    "program": {"reasoner": "The sum is small.\n#### 3", "tool_user": "```python\nprint(4)\n```"},
    "no_program": {"reasoner": "The sum is small.\n#### 3", "tool_user": "I cannot write it."},
}


class ConstantTimeBackend:
    """Returns the role's canned answer after `latency_s`, whatever the batch size."""

    def __init__(self, tokenizer, text: str, latency_s: float):
        self.ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.latency_s = latency_s

    async def generate(self, prompts, sampling):
        await asyncio.sleep(self.latency_s)
        return [Generation(list(self.ids), [-0.1] * len(self.ids), "stop") for _ in prompts]

    def update_weights(self, state_dict, version):
        pass


class InFlightClock:
    """Wraps a backend; `busy_s` = wall time during which at least one generation is in flight."""

    def __init__(self, backend):
        self.backend, self.in_flight, self.busy_s, self._since = backend, 0, 0.0, 0.0

    async def generate(self, prompts, sampling):
        if self.in_flight == 0:
            self._since = time.perf_counter()
        self.in_flight += 1
        try:
            return await self.backend.generate(prompts, sampling)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += time.perf_counter() - self._since

    def update_weights(self, state_dict, version):
        self.backend.update_weights(state_dict, version)


def math_problems(n: int) -> list[Problem]:
    return [
        Problem(uid=f"sum-{i}", domain="math", statement=f"What is {i} + {i + 1}?", answer=str(2 * i + 1))
        for i in range(n)
    ]


def standin_run(tokenizer, problems, group, horizon, latency_s, canned) -> dict:
    workflow = make_workflow("mas", "math", horizon=horizon)
    backends = {role: ConstantTimeBackend(tokenizer, CANNED[canned][role], latency_s) for role in workflow.roles}
    with RolloutManager(workflow, backends, tokenizer) as manager:
        start = time.perf_counter()
        results = episodes_of(asyncio.run(manager.run(problems, group_size=group)))
        wall = time.perf_counter() - start
    turns = sum(len(r.episode.turns) for r in results)
    rounds = max(len(r.episode.turns) for r in results)  # lockstep turns, each waiting latency_s once
    return {
        "answers": canned,
        "latency_s": latency_s,
        "episodes": len(results),
        "episode_turns": turns,
        "wall_s": round(wall, 3),
        "episodes_per_s": round(len(results) / wall, 2),
        "overhead_ms_per_episode_turn": round(1000 * (wall - rounds * latency_s) / turns, 3),
    }


def hf_run(model_path, problems, group, horizon, max_new_tokens) -> dict:
    workflow = make_workflow("mas", "math", horizon=horizon)
    clock = InFlightClock(HFBackend(model_path))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    with RolloutManager(
        workflow, {role: clock for role in workflow.roles}, clock.backend.tokenizer, sampling=sampling
    ) as manager:
        start = time.perf_counter()
        results = episodes_of(asyncio.run(manager.run(problems, group_size=group)))
        wall = time.perf_counter() - start
    return {
        "episodes": len(results),
        "turns": sum(len(r.episode.turns) for r in results),
        "max_new_tokens": max_new_tokens,
        "wall_s": round(wall, 3),
        "generation_s": round(clock.busy_s, 3),
        "share_outside_generation": round(1 - clock.busy_s / wall, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--horizon", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    model_path = cached_model(cache, size="tiny", seed=0)
    hf = HFBackend(model_path)
    problems = math_problems(args.problems)
    standin = [
        standin_run(hf.tokenizer, problems, args.group, args.horizon, latency, canned)
        for canned in CANNED
        for latency in (0.0, 0.05)
    ]
    real = hf_run(model_path, problems, args.group, args.horizon, args.max_new_tokens)
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "settings": vars(args),
        "standin_generator": standin,
        "hf_tiny_model": real,
        "target_share_outside_generation": 0.10,
    }
    save_result("rollout_overhead", report)


if __name__ == "__main__":
    main()
