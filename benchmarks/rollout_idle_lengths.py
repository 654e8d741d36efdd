"""Reply lengths measured from the tiny worlds' rollout records, and the generation engines' idle
share, lockstep against no barrier, when replies are drawn from them.

Lengths: every reply of the evaluation records archived by the comparison runs
(benchmarks/results/tiny_world_compare_runs/<method>/seed<s>/math.tar.gz and
search_world_compare_runs/<method>/seed<s>/qa.tar.gz, `eval/` only: the trained students of every
method and seed, sampling at the evaluation temperature), tokenized with the world's student
tokenizer, per role; a searcher's reply includes the tool observations inside it. Saved as
length → count histograms with their quantiles and tail ratios (p99 / p50, max / mean).

Idle share: `rollout_idle.py`'s continuous-batching stand-in (every request answered after
`tokens × step_s` seconds whatever else is in flight, busy while one is in flight), each reply's
length drawn from its policy's measured histogram (its roles' replies pooled), on the tiny world
(math) and the tiny search world (qa), `--problems` × `--group` episodes, both modes.

    VERL_PLATFORM=cpu python benchmarks/rollout_idle_lengths.py [--problems 32] [--group 2] [--step-s 0.005]
Writes benchmarks/results/reply_lengths_tiny_world.json and rollout_idle_measured_lengths.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from results_file import RESULTS, save_result
from rollout_idle import MODES, Busy, ScriptedServer, rollout, union_s, world_config
from transformers import AutoTokenizer

from data_prep.schema import read_problems
from verl_masopd.config import compose_config
from verl_masopd.config.run import build_workflow
from verl_masopd.config.validate import validate_config
from verl_masopd.rollout.policies import policy_of
from verl_masopd.tiny_world.world import models

ARCHIVES = {
    "math": ("tiny_world_compare_runs", "math.tar.gz", "math"),
    "qa": ("search_world_compare_runs", "qa.tar.gz", "search"),
}


def recorded_replies(world: str) -> dict[str, list[str]]:
    """role → the text of every reply in the world's archived evaluation records."""
    folder, name, _ = ARCHIVES[world]
    replies: dict[str, list[str]] = {}
    for archive in sorted((RESULTS / folder).glob(f"*/seed*/{name}")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if "/eval/" not in member.name or not member.name.endswith("records.jsonl"):
                    continue
                for line in tar.extractfile(member).read().decode().splitlines():
                    for episode in json.loads(line)["episodes"]:
                        roles = {a: info["role"] for a, info in episode["agents"].items()}
                        for turn in episode["turns"]:
                            for agent, text in turn["outputs"].items():
                                replies.setdefault(roles[agent], []).append(text)
    return replies


def summary(lengths: list[int]) -> dict:
    """Quantiles and tail ratios of a length sample, and its histogram (length → count)."""
    ordered = sorted(lengths)

    def q(p: float) -> int:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    mean = statistics.fmean(ordered)
    return {
        "replies": len(ordered),
        "mean": round(mean, 2),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": ordered[-1],
        "p99_over_p50": round(q(0.99) / q(0.5), 2),
        "max_over_mean": round(ordered[-1] / mean, 2),
        "histogram": {str(n): c for n, c in sorted(Counter(ordered).items())},
    }


def measured_lengths() -> dict[str, dict[str, list[int]]]:
    """world → role → the token length of every recorded reply."""
    out = {}
    for world, (_, _, domain) in ARCHIVES.items():
        tokenizer = AutoTokenizer.from_pretrained(models(domain)["student"])
        out[world] = {
            role: [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
            for role, texts in recorded_replies(world).items()
        }
    return out


def idle(world: str, folder: Path, lengths: dict[str, list[int]], n: int, group: int, step_s: float) -> dict:
    """Both modes' idle shares with replies drawn from `lengths` (role → lengths) per policy."""
    run = validate_config(compose_config(world_config(world, folder, n)))
    problems = read_problems(str(run.train_files[0]))[:n]
    tokenizer = AutoTokenizer.from_pretrained(run.policy_path(run.policies[0]))
    token = tokenizer.encode(" a", add_special_tokens=False)[0]
    agents = build_workflow(run.workflow).agents
    roles = {p: [a.role for a in agents if policy_of(a, run.workflow.policy_sharing) == p] for p in run.policies}
    busy = {p: Busy() for p in run.policies}
    servers = {}
    for p in run.policies:
        pool = [n for role in dict.fromkeys(roles[p]) for n in lengths[role]]
        servers[p] = ScriptedServer(
            tokenizer.eos_token_id, token, lambda rng, pool=pool: rng.choice(pool), step_s, busy[p]
        )
    out = {"problems": len(problems), "group_size": group, "policies": run.policies}
    for mode, barrier in MODES:
        for s in servers.values():
            s.seen.clear()
            s.area = 0.0
        out[mode] = rollout(run, servers, tokenizer, barrier, problems, group, busy)
        out[mode].pop("_lengths")
        busy_s = sum(union_s(b.intervals, 0, math.inf) for b in busy.values())
        out[mode]["mean_in_flight"] = round(sum(s.area for s in servers.values()) / busy_s, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.005, help="the stand-in server's seconds per token")
    args = parser.parse_args()
    random.seed(0)
    lengths = measured_lengths()
    save_result(
        "reply_lengths_tiny_world",
        {
            "source": "eval/ records of tiny_world_compare_runs and search_world_compare_runs",
            "worlds": {w: {role: summary(ns) for role, ns in roles.items()} for w, roles in lengths.items()},
        },
        echo=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "settings": vars(args),
            "lengths": "reply_lengths_tiny_world.json",
            "worlds": {w: idle(w, Path(tmp), lengths[w], args.problems, args.group, args.step_s) for w in lengths},
        }
    save_result("rollout_idle_measured_lengths", report)


if __name__ == "__main__":
    main()
