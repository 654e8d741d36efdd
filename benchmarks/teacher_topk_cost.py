"""Teacher cost of the top-k distillation modes against sampled-token scoring, and of a second teacher.

The tiny world's shipped math teacher on verl's engine (CPU, forward-only) scores the same
requests (teacher contexts of --context-len random tokens, responses of --response-len, pairs of
requests sharing their context prefix as RAS's passes do) on the engine scorer's default CPU path
(shared prefix): sampled-token log-probs (`score`) and the top k (`score_topk`, k = 8 and 32),
taking turns, median seconds of --repeats. Memory: the bytes of what each returns once in the
batch (teacher_log_probs [B, R] float32; top k adds teacher_topk_ids int64 and
teacher_topk_log_probs float32 [B, R, k]) and the engine's verl inputs for the loss
([B, P + R, k] each), and the process's peak RSS growth during the calls. A second teacher: the
RSS its engine adds when built (pages the first engine freed are reused, so this is a lower bound),
its parameters' bytes, and the seconds of scoring the same requests with both.
Writes benchmarks/results/teacher_topk_cost.json.

    VERL_PLATFORM=cpu python benchmarks/teacher_topk_cost.py [--requests 32] [--context-len 200]
        [--response-len 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time

os.environ.setdefault("VERL_PLATFORM", "cpu")

import psutil  # noqa: E402
import torch  # noqa: E402
from results_file import save_result

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine  # noqa: E402
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer  # noqa: E402
from verl_masopd.teacher.scoring import ScoreRequest  # noqa: E402
from verl_masopd.tiny_world.weights import WEIGHTS  # noqa: E402

TOPKS = (8, 32)


class PeakRss:
    """The process's peak RSS while the block runs, sampled every 5 ms."""

    def __enter__(self):
        self.process, self.peak, self.done = psutil.Process(), 0, False
        self.start = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.done = True
        self.thread.join()

    @property
    def growth_mb(self) -> float:
        return max(self.peak - self.start, 0) / 2**20


def requests(count: int, context_len: int, response_len: int, vocab: int, seed: int = 0) -> list[ScoreRequest]:
    """Pairs of requests with one response and contexts sharing all but their last 20 tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count // 2):
        shared = torch.randint(3, vocab, (context_len - 20,), generator=g).tolist()
        response = torch.randint(3, vocab, (response_len,), generator=g).tolist()
        for _ in range(2):
            out.append(ScoreRequest(shared + torch.randint(3, vocab, (20,), generator=g).tolist(), response))
    return out


def batch_bytes(rows: int, response_len: int, context_len: int, k: int) -> dict[str, int]:
    """What the scores occupy once in the batch, and verl's [B, P + R, k] engine inputs."""
    sampled = rows * response_len * 4
    if not k:
        return {"batch": sampled, "engine_inputs": rows * (context_len + response_len) * (8 + 4)}
    return {
        "batch": sampled + rows * response_len * k * (8 + 4),
        "engine_inputs": rows * (context_len + response_len) * k * (8 + 4),
    }


async def timed(call, repeats: int) -> tuple[float, float]:
    seconds, growth = [], 0.0
    for _ in range(repeats):
        with PeakRss() as rss:
            start = time.perf_counter()
            await call()
            seconds.append(time.perf_counter() - start)
        growth = max(growth, rss.growth_mb)
    return statistics.median(seconds), growth


async def main(args) -> dict:
    teacher_path = str(WEIGHTS / "math" / "teacher")
    rss = psutil.Process().memory_info().rss
    first = PolicyEngine.local(EngineSettings(model_path=teacher_path, forward_only=True))
    first_mb = (psutil.Process().memory_info().rss - rss) / 2**20
    scorer = EngineTeacherScorer(first, pad_id=0, share_prefix=True)
    vocab = first.hf_state_dict()["model.embed_tokens.weight"].shape[0]
    batch = requests(args.requests, args.context_len, args.response_len, vocab)
    await scorer.score(batch[:2])  # warm-up
    variants = {"sampled": lambda: scorer.score(batch)} | {
        f"top{k}": (lambda k=k: scorer.score_topk(batch, k)) for k in TOPKS
    }
    runs = {name: [] for name in variants}
    growth = dict.fromkeys(variants, 0.0)
    for _ in range(args.repeats):  # the variants take turns
        for name, call in variants.items():
            seconds, peak = await timed(call, 1)
            runs[name].append(seconds)
            growth[name] = max(growth[name], peak)
    result = {
        "teacher": "tiny world math teacher (shipped weights), engine scorer, shared-prefix path",
        "requests": args.requests,
        "context_len": args.context_len,
        "response_len": args.response_len,
        "repeats": args.repeats,
        "variants": {
            name: {
                "seconds": statistics.median(runs[name]),
                "over_sampled": statistics.median(runs[name]) / statistics.median(runs["sampled"]),
                "peak_rss_growth_mb": growth[name],
                "bytes": batch_bytes(
                    args.requests, args.response_len, args.context_len, int(name[3:]) if name != "sampled" else 0
                ),
            }
            for name in variants
        },
    }
    rss = psutil.Process().memory_info().rss
    second = PolicyEngine.local(EngineSettings(model_path=teacher_path, forward_only=True, seed=1))
    second_mb = (psutil.Process().memory_info().rss - rss) / 2**20
    other = EngineTeacherScorer(second, pad_id=0, share_prefix=True)
    await other.score(batch[:2])

    async def both():
        await scorer.score(batch)
        await other.score(batch)

    both_seconds, _ = await timed(both, args.repeats)
    weights = second.hf_state_dict()
    result["second_teacher"] = {
        "parameter_mb": sum(t.numel() * t.element_size() for t in weights.values()) / 2**20,
        "first_engine_rss_mb": first_mb,
        "second_engine_rss_mb": second_mb,
        "two_teachers_seconds": both_seconds,
        "over_one_teacher": both_seconds / result["variants"]["sampled"]["seconds"],
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--context-len", type=int, default=200)
    parser.add_argument("--response-len", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    save_result("teacher_topk_cost", asyncio.run(main(parser.parse_args())))
