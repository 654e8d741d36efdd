"""A projection, not a measurement: the training step at the paper's scale on GPUs, lockstep against
no turn barrier, teacher scoring overlapped with the rollout, and the rollout beside the update.

Measured inputs (this repository's JSON):
- reply lengths: benchmarks/results/reply_lengths_tiny_world.json (math, per role), their shape
  stretched to the paper's response cap: L = round(cap × l / 48) for a tiny-world length l;
- episode length: the tiny world's turns per episode (rollout_idle.json, math, HF lockstep) give
  the chance h that an episode goes on after a turn (mean turns m over horizon 2: h = m − 1), the
  same h at every turn of the paper's horizon;
- the teacher's share of the step on CPU (step_time_tiny_world.json), reported beside the
  projection.

Assumed (the `ASSUMED` table, each a flag): the paper's setting (128 problems × G 4, 8 agents in
two role policies, horizon 4, κ 1, responses ≤ 4,096 tokens, a mean context of 2,048 tokens per
reply), 8 GPUs for the students (vLLM colocated with training) and 8 for an 8B teacher on vLLM (its own node),
decode step time t(b) = t0 + t1·b for b sequences in flight on one GPU (at most `slots`), prefill
and training throughput from FLOPs (2P per token forward, 6P forward + backward) at an MFU.

Model of one step. Rollout: a discrete-event simulation of continuous batching (each request
joins the GPU with the fewest in flight, a request waits when every GPU has `slots`), lockstep
(every turn of every episode waits for the turn's slowest reply) or no barrier (an episode's
next turn goes out when its own replies are back). Teacher: (1 + κ) passes of context + reply
tokens at the teacher's prefill rate, after the rollout, or overlapped (finished episodes queue
FIFO as they end; the step waits for the queue left at the rollout's end). Log-probs, update, and a
fixed weight sync on the students' GPUs. Rollout beside the update with bound b (the rollout of
step k runs with weights at most b updates old): the students' GPUs split, half generating and
half training; rollout k starts when rollout k − 1 is done and update k − 1 − b is; update k when
rollout k (with its teacher scores) and update k − 1 are; the mean step over `--steps` steps.

    python benchmarks/async_projection.py [--steps 4] [--seed 0] [--cap 4096] [...ASSUMED flags] [--name N]
Writes benchmarks/results/async_projection.json (or <N>.json).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
from collections import deque

from results_file import RESULTS, save_result

ASSUMED = {
    "problems": 128,
    "group": 4,
    "agents": 8,
    "horizon": 4,
    "kappa": 1,
    "cap": 4096,
    "context_tokens": 2048,
    "student_params": 1.7e9,
    "teacher_params": 8.0e9,
    "student_gpus": 8,
    "teacher_gpus": 8,
    "slots": 256,
    "t0_ms": 12.0,
    "t1_ms": 0.06,
    "peak_tflops": 989.0,
    "mfu": 0.35,
    "weight_sync_s": 5.0,
}


def measured() -> dict:
    """The measured inputs: per-role length samples (tiny world, math) and the turn hazard."""
    lengths = json.loads((RESULTS / "reply_lengths_tiny_world.json").read_text())["worlds"]["math"]
    idle = json.loads((RESULTS / "rollout_idle.json").read_text())["worlds"]["math"]["hf"]["lockstep"]
    episodes = json.loads((RESULTS / "rollout_idle.json").read_text())["worlds"]["math"]
    mean_turns = idle["turns"] / (episodes["problems"] * episodes["group_size"])
    steps = json.loads((RESULTS / "step_time_tiny_world.json").read_text())["seconds_per_step"]["masopd"]
    return {
        "lengths": {role: [int(n) for n, c in s["histogram"].items() for _ in range(c)] for role, s in lengths.items()},
        "tiny_cap": 48,
        "mean_turns_tiny": mean_turns,
        "go_on": min(1.0, max(0.0, mean_turns - 1)),
        "cpu_masopd_step_s": steps,
    }


def episodes(a: dict, m: dict, rng: random.Random) -> list[list[list[int]]]:
    """Per episode, per turn, the reply lengths of its agents (half of each role)."""
    roles = sorted(m["lengths"])
    out = []
    for _episode in range(a["problems"] * a["group"]):
        turns = []
        for _ in range(a["horizon"]):
            turns.append(
                [
                    max(1, round(a["cap"] * rng.choice(m["lengths"][roles[i % len(roles)]]) / m["tiny_cap"]))
                    for i in range(a["agents"])
                ]
            )
            if rng.random() >= m["go_on"]:
                break
        out.append(turns)
    return out


def rollout(a: dict, plays: list[list[list[int]]], gpus: int, barrier: bool) -> tuple[float, list[float], float]:
    """(rollout seconds, each episode's end time, mean idle share of the GPUs) of continuous batching.

    Every sequence in flight on a GPU advances one token per decode step of t(b) seconds; a GPU
    keeps its steps done (`done`) and a heap of the step counts at which its requests finish."""
    t0, t1 = a["t0_ms"] / 1e3, a["t1_ms"] / 1e3
    heaps: list[list[tuple[float, int]]] = [[] for _ in range(gpus)]
    done = [0.0] * gpus
    waiting: deque[tuple[int, int]] = deque()  # (episode, tokens) with no slot yet
    pending = [0] * len(plays)  # replies of an episode's current turn still out
    turn = [0] * len(plays)
    ends = [0.0] * len(plays)
    busy = [0.0] * gpus
    now = 0.0

    def submit(e: int) -> None:
        waiting.extend((e, n) for n in plays[e][turn[e]])
        pending[e] = len(plays[e][turn[e]])

    def place() -> None:
        while waiting:
            g = min(range(gpus), key=lambda i: len(heaps[i]))
            if len(heaps[g]) >= a["slots"]:
                return
            e, n = waiting.popleft()
            heapq.heappush(heaps[g], (done[g] + n, e))

    for e in range(len(plays)):
        submit(e)
    place()
    while any(heaps):
        dt = min((h[0][0] - done[g]) * (t0 + t1 * len(h)) for g, h in enumerate(heaps) if h)
        now += dt
        finished = []
        for g, h in enumerate(heaps):
            if not h:
                continue
            busy[g] += dt
            done[g] += dt / (t0 + t1 * len(h))
            while h and h[0][0] <= done[g] + 1e-9:
                finished.append(heapq.heappop(h)[1])
        for e in finished:
            pending[e] -= 1
            if pending[e]:
                continue
            turn[e] += 1
            if turn[e] == len(plays[e]):
                ends[e] = now
            elif not barrier:
                submit(e)
        if barrier and not waiting and not any(heaps):
            for e in range(len(plays)):
                if turn[e] < len(plays[e]):
                    submit(e)
        place()
    return now, ends, 1 - statistics.fmean(busy) / now


def teacher_left(a: dict, plays, ends: list[float], rollout_s: float, rate: float) -> tuple[float, float]:
    """(seconds of teacher scoring after the rollout, total teacher seconds) with the episodes
    queued as they end (FIFO at `rate` tokens/s)."""
    clock, total = 0.0, 0.0
    for e in sorted(range(len(plays)), key=lambda i: ends[i]):
        seconds = teacher_tokens(a, plays[e]) / rate
        clock = max(clock, ends[e]) + seconds
        total += seconds
    return max(0.0, clock - rollout_s), total


def teacher_tokens(a: dict, play) -> int:
    return (1 + a["kappa"]) * sum(a["context_tokens"] + n for turn in play for n in turn)


def train_s(a: dict, plays, gpus: int) -> tuple[float, float]:
    """(log-prob seconds, update seconds) on `gpus` student GPUs."""
    tokens = sum(a["context_tokens"] + n for play in plays for turn in play for n in turn)
    flops = a["peak_tflops"] * 1e12 * a["mfu"] * gpus
    return 2 * a["student_params"] * tokens / flops, 6 * a["student_params"] * tokens / flops


def project(a: dict, m: dict, steps: int, seed: int) -> dict:
    rng = random.Random(seed)
    teacher_rate = a["peak_tflops"] * 1e12 * a["mfu"] * a["teacher_gpus"] / (2 * a["teacher_params"])
    rows = {k: [] for k in ("lockstep", "no_barrier", "no_barrier_overlap", "beside_bound1", "beside_bound2")}
    split = []  # per step: (rollout + teacher left, train) with half the GPUs each
    idle = {"lockstep": [], "no_barrier": []}
    for _ in range(steps):
        plays = episodes(a, m, rng)
        log_prob, update = train_s(a, plays, a["student_gpus"])
        train = log_prob + update + a["weight_sync_s"]
        teacher_total = sum(teacher_tokens(a, p) for p in plays) / teacher_rate
        lock_s, _, lock_idle = rollout(a, plays, a["student_gpus"], True)
        free_s, ends, free_idle = rollout(a, plays, a["student_gpus"], False)
        left, _ = teacher_left(a, plays, ends, free_s, teacher_rate)
        idle["lockstep"].append(lock_idle)
        idle["no_barrier"].append(free_idle)
        rows["lockstep"].append({"rollout": lock_s, "teacher": teacher_total, "train": train})
        rows["no_barrier"].append({"rollout": free_s, "teacher": teacher_total, "train": train})
        rows["no_barrier_overlap"].append({"rollout": free_s, "teacher": left, "train": train})
        half = a["student_gpus"] // 2
        half_s, half_ends, _ = rollout(a, plays, half, False)
        half_left, _ = teacher_left(a, plays, half_ends, half_s, teacher_rate)
        lp, up = train_s(a, plays, a["student_gpus"] - half)
        split.append((half_s + half_left, lp + up + a["weight_sync_s"]))
    out = {}
    for mode in ("lockstep", "no_barrier", "no_barrier_overlap"):
        phases = {k: statistics.fmean(r[k] for r in rows[mode]) for k in ("rollout", "teacher", "train")}
        out[mode] = {**{f"{k}_s": round(v, 1) for k, v in phases.items()}, "step_s": round(sum(phases.values()), 1)}
    for bound in (1, 2):
        out[f"beside_bound{bound}"] = {"step_s": round(pipelined(split, bound), 1), "gpus_generating": half}
    base = out["lockstep"]["step_s"]
    for row in out.values():
        row["saving_vs_lockstep"] = round(1 - row["step_s"] / base, 3)
    out["lockstep"]["rollout_idle_share"] = round(statistics.fmean(idle["lockstep"]), 3)
    out["no_barrier"]["rollout_idle_share"] = round(statistics.fmean(idle["no_barrier"]), 3)
    return out


def pipelined(split: list[tuple[float, float]], bound: int) -> float:
    """Mean step seconds when rollout k may start once rollout k − 1 and update k − 1 − bound are done."""
    rollout_end, train_end = [], []
    for k, (gen, train) in enumerate(split):
        start = max(rollout_end[-1] if rollout_end else 0.0, train_end[k - 1 - bound] if k - 1 - bound >= 0 else 0.0)
        rollout_end.append(start + gen)
        train_end.append(max(rollout_end[-1], train_end[-1] if train_end else 0.0) + train)
    return train_end[-1] / len(split)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="simulated steps (each its own draw of episodes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="async_projection", help="results file name")
    for key, value in ASSUMED.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args()
    assumed = {k: getattr(args, k) for k in ASSUMED}
    m = measured()
    report = {
        "kind": "projection from measured tiny-world inputs and the assumptions listed; not a measurement",
        "assumed": assumed,
        "measured_inputs": {
            "reply_lengths": "reply_lengths_tiny_world.json (math)",
            "mean_turns_tiny_world": round(m["mean_turns_tiny"], 3),
            "chance_an_episode_goes_on_after_a_turn": round(m["go_on"], 3),
            "cpu_masopd_step_s": {k: round(v, 3) for k, v in m["cpu_masopd_step_s"].items()},
        },
        "steps": args.steps,
        "modes": project(assumed, m, args.steps, args.seed),
    }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
