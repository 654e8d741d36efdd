"""Tokens/s of the engine's passes against a plain transformers forward on the same requests.

Side by side in one run, the variants taking turns repeat by repeat: a plain transformers forward
(and forward + backward) of each sequence alone, without padding, is the reference; against it,
verl's engine (`PolicyEngine`) as the teacher scorer (forward-only), the students' log-prob pass
and the update (one optimizer step over the batch), each with the packed attention the engine
uses now (`platform.packed_attention`) in float32 and bfloat16 compute, and with transformers'
plain "sdpa" (before the change) in float32. Also the largest log-prob difference of every variant from the
float32 reference. Writes benchmarks/results/forward_speed.json.

    VERL_PLATFORM=cpu python benchmarks/forward_speed.py [--requests 8] [--context 1100] [--response 48]
        [--model PATH --name NAME]   (e.g. the tiny world's student: verl_masopd/tiny_world/weights/math/student)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")

import torch  # noqa: E402
from results_file import save_result
from transformers import AutoModelForCausalLM  # noqa: E402

import verl_masopd.engine.policy_engine as engine_module  # noqa: E402
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine, policy_loss  # noqa: E402
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer, scoring_batch  # noqa: E402
from verl_masopd.teacher.scoring import ScoreRequest  # noqa: E402
from verl_masopd.tiny_world.models import cached_model  # noqa: E402


def make_requests(count: int, context: int, response: int, vocab: int, seed: int) -> list[ScoreRequest]:
    """Random ids; contexts spread ±20% around `context` so that packing and padding both matter."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(context * 0.8), int(context * 1.2) + 1, (count,), generator=generator).tolist()
    return [
        ScoreRequest(
            torch.randint(3, vocab, (n,), generator=generator).tolist(),
            torch.randint(3, vocab, (response,), generator=generator).tolist(),
        )
        for n in lengths
    ]


def plain_log_probs(model, requests, dtype: torch.dtype, backward: bool = False) -> list[list[float]]:
    """log p(y_i | x, y_<i) from one unpadded forward per sequence (and a backward when asked)."""
    out = []
    for r in requests:
        seq = torch.tensor([r.context_ids + r.response_ids])
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32), torch.set_grad_enabled(backward):
            logits = model(input_ids=seq).logits
        rows = torch.log_softmax(logits.float()[0, len(r.context_ids) - 1 : -1], dim=-1)
        chosen = rows.gather(-1, torch.tensor(r.response_ids)[:, None])[:, 0]
        if backward:
            chosen.mean().backward()
        out.append(chosen.detach().tolist())
    return out


@contextmanager
def attention(name: str):
    """Engines built inside use transformers attention `name` instead of the packed default."""
    chosen = engine_module.packed_attention_implementation
    engine_module.packed_attention_implementation = lambda: name
    try:
        yield
    finally:
        engine_module.packed_attention_implementation = chosen


def build_engines(model_path: str, dtypes: list[str]) -> dict[str, tuple[PolicyEngine, PolicyEngine]]:
    engines = {}
    for attn, dtype in [("packed", d) for d in dtypes] + [("sdpa", "float32")]:
        with attention("sdpa" if attn == "sdpa" else engine_module.packed_attention_implementation()):
            teacher = PolicyEngine.local(EngineSettings(model_path=model_path, forward_only=True, dtype=dtype))
            student = PolicyEngine.local(EngineSettings(model_path=model_path, dtype=dtype, lr=0.0))
        engines[f"{attn}/{dtype}"] = (teacher, student)
    return engines


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def main(args) -> dict:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    model_path = args.model or cached_model(cache, size="small", seed=1)
    model = AutoModelForCausalLM.from_pretrained(model_path, attn_implementation="sdpa", dtype=torch.float32)
    requests = make_requests(args.requests, args.context, args.response, model.config.vocab_size, seed=0)
    tokens = sum(len(r.context_ids) + len(r.response_ids) for r in requests)
    dtypes = ["float32", "bfloat16"]
    engines = build_engines(model_path, dtypes)
    batch = scoring_batch(requests, pad_id=0)
    batch.batch["advantages"] = torch.ones_like(batch.batch["response_mask"], dtype=torch.float32)
    batch.batch["old_log_probs"] = torch.zeros_like(batch.batch["advantages"])
    loss = policy_loss("vanilla")

    def engine_passes(name):
        teacher, student = engines[name]
        scorer = EngineTeacherScorer(teacher, pad_id=0)
        return {
            "teacher": lambda: asyncio.run(scorer.score(requests)),
            "log_prob": lambda: student.infer_batch(batch),
            "update": lambda: student.train_mini_batch(batch, loss),
        }

    variants = {f"plain_forward/{d}": lambda d=d: plain_log_probs(model, requests, getattr(torch, d)) for d in dtypes}
    variants.update(
        {
            f"plain_forward_backward/{d}": lambda d=d: plain_log_probs(model, requests, getattr(torch, d), True)
            for d in dtypes
        }
    )
    for name in engines:
        for phase, fn in engine_passes(name).items():
            variants[f"{phase}/{name}"] = fn
    for fn in variants.values():
        fn()  # warm-up
    seconds = {name: [] for name in variants}
    values = {}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            elapsed, value = timed(fn)
            seconds[name].append(elapsed)
            values[name] = value
    reference = values["plain_forward/float32"]

    def as_lists(name, value):
        if name.startswith(("plain", "teacher")):
            return value
        if name.startswith("log_prob"):
            return [value[b, : len(r.response_ids)].tolist() for b, r in enumerate(requests)]
        return None

    result = {
        "model": args.model or "tiny small (~10M params, Qwen3 architecture)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": "cpu (ratios are side by side in one run)",
        "torch_threads": torch.get_num_threads(),
        "requests": args.requests,
        "context_tokens_mean": args.context,
        "response_tokens": args.response,
        "tokens_per_pass": tokens,
        "repeats": args.repeats,
        "variants": {},
    }
    for name, runs in seconds.items():
        median = statistics.median(runs)
        lists = as_lists(name, values[name])
        result["variants"][name] = {
            "seconds": median,
            "tokens_per_s": tokens / median,
            "max_abs_log_prob_diff_vs_fp32_plain": max_diff(lists, reference) if lists is not None else None,
        }
    v = result["variants"]
    ratios = {}
    for d in dtypes:
        for attn in ("packed", "sdpa") if d == "float32" else ("packed",):
            ratios[f"teacher/{attn}/{d} vs plain_forward/{d}"] = (
                v[f"teacher/{attn}/{d}"]["tokens_per_s"] / v[f"plain_forward/{d}"]["tokens_per_s"]
            )
            ratios[f"log_prob/{attn}/{d} vs plain_forward/{d}"] = (
                v[f"log_prob/{attn}/{d}"]["tokens_per_s"] / v[f"plain_forward/{d}"]["tokens_per_s"]
            )
            ratios[f"update/{attn}/{d} vs plain_forward_backward/{d}"] = (
                v[f"update/{attn}/{d}"]["tokens_per_s"] / v[f"plain_forward_backward/{d}"]["tokens_per_s"]
            )
    for phase in ("teacher", "log_prob", "update"):
        ratios[f"{phase}/packed/float32 vs {phase}/sdpa/float32"] = (
            v[f"{phase}/packed/float32"]["tokens_per_s"] / v[f"{phase}/sdpa/float32"]["tokens_per_s"]
        )
    for phase in ("teacher", "log_prob", "update"):
        ratios[f"{phase}/packed: bfloat16 vs float32 speed"] = (
            v[f"{phase}/packed/bfloat16"]["tokens_per_s"] / v[f"{phase}/packed/float32"]["tokens_per_s"]
        )
    result["ratios"] = ratios
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--context", type=int, default=1100)
    parser.add_argument("--response", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", help="a model folder (default: the random ~10M 'small' tiny model)")
    parser.add_argument("--name", default="forward_speed", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    save_result(args.name, main(args))
