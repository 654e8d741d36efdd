"""How much of the rollout the generation engines spend with nothing to do, lockstep turns
(rollout.turn_barrier=true) against episodes that advance on their own (false), and the training
step's time in both modes.

Worlds: the tiny world (math, preset=tiny_world: two roles, horizon 2, replies within 48 tokens)
and the tiny search world (qa, preset=tiny_search: Leader, waves of Searchers with a BM25 tool,
Answerers, horizon 6, one shared policy), their shipped students, the training sampling (T 1).

Engines:
- hf: the HF backend, one per policy. An engine is busy while one of its model's forward passes
  runs (timed around `model.forward`); the HF backends of a process compute one at a time, so
  the device is busy during the union of all of them.
- scripted: a stand-in for a continuous-batching server per policy (vLLM's engine loop): every
  request is answered after `tokens × step_s` seconds, whatever else is in flight, with a reply
  length drawn from a lognormal fitted to the lengths the HF rollout of the same world generated
  (log-length mean and deviation, clipped to [1, max_new_tokens]); a reply is that many copies of
  one token, so the workflow plays its whole horizon. The engine is busy while at least one
  request is in flight; `mean_in_flight` is the requests in flight averaged over the busy time.

idle_share = 1 − busy / wall, per engine (policy) and for the device (the union), wall = the
rollout's wall time. Step time: `Trainer.train_step` of masopd on the tiny world (math), the
first step dropped as warm-up.

    VERL_PLATFORM=cpu python benchmarks/rollout_idle.py [--problems 8] [--group 2] [--steps 3]
        [--step-s 0.005] [--skip-step-time]
Writes benchmarks/results/rollout_idle.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from results_file import save_result  # noqa: E402

from data_prep.schema import read_problems  # noqa: E402
from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.run import build_workflow  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.rollout.backend import Generation  # noqa: E402
from verl_masopd.rollout.hf_backend import HFBackend  # noqa: E402
from verl_masopd.rollout.manager import RolloutManager  # noqa: E402
from verl_masopd.rollout.records import LENGTH  # noqa: E402
from verl_masopd.tiny_world.world import ensure_data, ensure_search_data, models  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402


class Busy:
    """The (start, end) intervals during which an engine computes or has requests in flight."""

    def __init__(self):
        self.intervals: list[tuple[float, float]] = []

    def add(self, start: float, end: float) -> None:
        self.intervals.append((start, end))


def union_s(intervals, since: float, until: float) -> float:
    total, reach = 0.0, since
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, until)
        if end > start:
            total += end - start
            reach = end
    return total


class InFlight:
    """The requests in flight at an engine: the busy intervals (at least one in flight) go to
    `busy`; `area` is the integral of the count over time, for the mean batch width."""

    def __init__(self, busy: Busy):
        self.busy, self.in_flight, self.start, self.since, self.area = busy, 0, 0.0, 0.0, 0.0

    def count(self, change: int) -> None:
        now = time.perf_counter()
        self.area += self.in_flight * (now - self.since)
        if self.in_flight == 0:
            self.start = now
        self.in_flight += change
        if self.in_flight == 0:
            self.busy.add(self.start, now)
        self.since = now


def timed_forward(backend: HFBackend, busy: Busy) -> None:
    forward = backend.model.forward

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            busy.add(start, time.perf_counter())

    backend.model.forward = timed


class ScriptedServer:
    """A continuous-batching stand-in: each request answered after `tokens × step_s` seconds, its
    length `draw(rng)` (rounded, clipped to [1, max_new_tokens]) from a generator seeded by the
    request's context and its count."""

    def __init__(self, eos_id: int, token_id: int, draw: Callable[[random.Random], float], step_s: float, busy: Busy):
        self.eos_id, self.token_id, self.draw, self.step_s = eos_id, token_id, draw, step_s
        self.requests = InFlight(busy)
        self.seen: dict[bytes, int] = {}

    async def generate(self, prompts, sampling):
        return list(await asyncio.gather(*(self._one(p, sampling) for p in prompts)))

    async def _one(self, prompt, sampling) -> Generation:
        key = hashlib.sha256(str(prompt).encode()).digest()
        self.seen[key] = self.seen.get(key, 0) + 1  # the k-th request of one context draws the k-th length
        rng = random.Random(key + bytes([self.seen[key]]))
        n = min(sampling.max_new_tokens, max(1, round(self.draw(rng))))
        self.requests.count(+1)
        await asyncio.sleep(n * self.step_s)
        self.requests.count(-1)
        ids = [self.token_id] * (n - 1) + [self.eos_id]
        return Generation(ids, [0.0] * n, "stop" if n < sampling.max_new_tokens else LENGTH)

    def update_weights(self, state_dict, version):
        pass


def world_config(world: str, folder: Path, problems: int):
    if world == "math":
        train, _ = ensure_data(folder, "math", problems, 1)
        extra = ["preset=tiny_world", "workflow.domain=math"]
    else:
        paths = ensure_search_data(folder, problems, 1)
        train = paths["train"]
        extra = [
            "preset=tiny_search",
            "workflow.name=search",
            "workflow.domain=qa",
            f"++workflow.options.retriever={paths['index']}",
        ]
    domain = "math" if world == "math" else "search"
    weights = models(domain)
    return [
        *extra,
        "engines.placement=local",
        f"students.path={weights['student']}",
        f"teacher.model_path={weights['teacher']}",
        f"data.train_files=[{train}]",
        f"data.train_batch_size={problems}",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={folder / 'checkpoints'}",
    ]


def rollout(run, backends, tokenizer, turn_barrier: bool, problems, group: int, busy: dict[str, Busy]) -> dict:
    with RolloutManager(
        build_workflow(run.workflow),
        backends,
        tokenizer,
        policy_sharing=run.workflow.policy_sharing,
        sampling=run.train_sampling,
        max_prompt_len=run.data.max_prompt_length,
        context_layout=run.workflow.context_layout,
        turn_barrier=turn_barrier,
    ) as m:
        for b in busy.values():
            b.intervals.clear()
        start = time.perf_counter()
        groups = asyncio.run(m.run(problems, group_size=group))
        end = time.perf_counter()
    wall = end - start
    every = [i for b in busy.values() for i in b.intervals]
    lengths = [len(s.response_ids) for g in groups for r in g.episodes for s in r.samples]
    return {
        "wall_s": round(wall, 3),
        "device_idle_share": round(1 - union_s(every, start, end) / wall, 4),
        "idle_share_per_policy": {p: round(1 - union_s(b.intervals, start, end) / wall, 4) for p, b in busy.items()},
        "turns": m.metrics.turns,
        "replies": len(lengths),
        "reply_tokens": sum(lengths),
        "_lengths": lengths,
    }


def world_idle(world: str, folder: Path, n: int, group: int, step_s: float) -> dict:
    cfg = compose_config(world_config(world, folder, n))
    run = validate_config(cfg)
    problems = read_problems(str(run.train_files[0]))[:n]
    out: dict = {"problems": len(problems), "group_size": group, "policies": run.policies}
    busy = {p: Busy() for p in run.policies}
    hf = {}
    for p in run.policies:
        hf[p] = HFBackend(run.policy_path(p), seed=0)
        timed_forward(hf[p], busy[p])
    tokenizer = hf[run.policies[0]].tokenizer
    out["hf"] = {mode: rollout(run, hf, tokenizer, barrier, problems, group, busy) for mode, barrier in MODES}
    lengths = out["hf"]["lockstep"].pop("_lengths")
    out["hf"]["no_barrier"].pop("_lengths")
    logs = [math.log(n) for n in lengths]
    mu, sigma = statistics.fmean(logs), statistics.pstdev(logs)
    token = tokenizer.encode(" a", add_special_tokens=False)[0]
    servers = {
        p: ScriptedServer(tokenizer.eos_token_id, token, lambda rng: math.exp(rng.gauss(mu, sigma)), step_s, busy[p])
        for p in run.policies
    }
    scripted = {}
    for mode, barrier in MODES:
        for s in servers.values():
            s.seen.clear()
            s.requests.area = 0.0
        scripted[mode] = rollout(run, servers, tokenizer, barrier, problems, group, busy)
        scripted[mode].pop("_lengths")
        busy_s = sum(union_s(b.intervals, 0, math.inf) for b in busy.values())
        scripted[mode]["mean_in_flight"] = round(sum(s.requests.area for s in servers.values()) / busy_s, 3)
    out["scripted_lognormal"] = {
        "fitted_to_hf_lockstep_lengths": {"log_mean": round(mu, 4), "log_sd": round(sigma, 4), "replies": len(lengths)},
        "step_s": step_s,
        **scripted,
    }
    return out


def step_time(folder: Path, n: int, steps: int) -> dict:
    out = {}
    for mode, barrier in MODES:
        overrides = [
            *world_config("math", folder / mode, n),
            f"rollout.turn_barrier={str(barrier).lower()}",
            f"trainer.total_training_steps={steps}",
        ]
        trainer = Trainer(validate_config(compose_config(overrides)))
        rows, seconds = [], []
        try:
            for _ in range(steps):
                start = time.perf_counter()
                rows.append(trainer.train_step())
                seconds.append(time.perf_counter() - start)
        finally:
            trainer.close()
        out[mode] = {
            "step_s": round(statistics.fmean(seconds[1:]), 3),
            "rollout_s": round(statistics.fmean(r["timing_s/rollout"] for r in rows[1:]), 3),
            "steps_measured": len(rows) - 1,
        }
    return out


MODES = (("lockstep", True), ("no_barrier", False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="training steps per mode (the first dropped)")
    parser.add_argument("--step-s", type=float, default=0.005, help="the scripted server's seconds per token")
    parser.add_argument("--skip-step-time", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "settings": vars(args),
            "worlds": {w: world_idle(w, Path(tmp), args.problems, args.group, args.step_s) for w in ("math", "qa")},
        }
        if not args.skip_step_time:
            report["step_time_tiny_world_math"] = step_time(Path(tmp), args.problems, args.steps)
    save_result("rollout_idle", report)


if __name__ == "__main__":
    main()
