"""A teacher pass on a real model against a plain forward of the same tokens, both in bfloat16.
Writes benchmarks/results/NAME.json (--name, default teacher_pass_speed).

The same `--batch` sequences (a chat prompt of about `--prompt-tokens` tokens, then a response of
`--response-tokens` tokens), scored by each case in a process of its own, one warm-up call then
`--repeats` timed calls:

- `engine`: `EngineTeacherScorer.score` (teacher/engine_scorer.py) over a forward-only
  `PolicyEngine` in bfloat16 compute with the trainer's micro-batch (`--micro-tokens`, the
  default of `engines.max_tokens_per_micro_batch`): the teacher's scoring pass in a step;
- `plain`: one transformers forward (sdpa) of the same sequences, left-padded into one batch, in
  bfloat16 weights, the logits of the response positions only (`logits_to_keep`), their
  log-softmax gathered at the response tokens.

tokens/s counts every token of the sequences (context and response) over the call's wall time,
median of the repeats; the goal is engine ≥ 0.9 × plain. `max_abs_diff` is the largest
difference between the two cases' log-probs of one response token (bfloat16 compute on both
sides). The machine may be shared: the load averages before and after each case are recorded.

    python benchmarks/teacher_pass_speed.py [--model DIR] [--batch 16] [--prompt-tokens 640]
        [--response-tokens 128] [--repeats 2] [--micro-tokens 16384] [--name teacher_pass_speed]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from child_case import run_case
from real_model_speed import TEXT, prompts, timed
from results_file import save_result

ROOT = Path(__file__).resolve().parents[1]
# python -m verl_masopd.models fetch qwen2.5-coder-1.5b-instruct --out .cache/models/qwen2.5-coder-1.5b-instruct
TEACHER = ROOT / ".cache" / "models" / "qwen2.5-coder-1.5b-instruct"
CASES = ("engine", "plain")


def sequences(tokenizer, batch: int, prompt_tokens: int, response_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(context ids, response ids) per row: the speed benchmark's prompts, a text as the response."""
    response = tokenizer(TEXT * (response_tokens // 20 + 1))["input_ids"][:response_tokens]
    return [(context, response) for context in prompts(tokenizer, batch, prompt_tokens)]


def engine_case(model: str, rows, repeats: int, micro_tokens: int) -> dict:
    from transformers import AutoTokenizer

    from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
    from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
    from verl_masopd.teacher.scoring import ScoreRequest

    started = time.perf_counter()
    settings = EngineSettings(model, forward_only=True, dtype="bfloat16", max_tokens_per_micro_batch=micro_tokens)
    engine = PolicyEngine.local(settings)
    start_s = time.perf_counter() - started
    scorer = EngineTeacherScorer(engine, AutoTokenizer.from_pretrained(model).pad_token_id)
    requests = [ScoreRequest(context, response) for context, response in rows]
    scores: list = []

    def call() -> int:
        scores[:] = asyncio.run(scorer.score(requests))
        return sum(len(c) + len(r) for c, r in rows)

    return {"start_s": start_s, **timed(call, repeats), "log_probs": scores}


def plain_case(model: str, rows, repeats: int, micro_tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    start_s = time.perf_counter() - started
    width = max(len(c) + len(r) for c, r in rows)
    response_len = len(rows[0][1])
    ids = torch.tensor([[0] * (width - len(c) - len(r)) + c + r for c, r in rows])
    mask = torch.tensor([[0] * (width - len(c) - len(r)) + [1] * (len(c) + len(r)) for c, r in rows])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    responses = ids[:, -response_len:]
    scores: list = []

    def call() -> int:
        with torch.inference_mode():
            logits = lm(
                input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=response_len + 1
            ).logits[:, :-1]
            picked = logits.float().log_softmax(-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        scores[:] = picked.tolist()
        return int(mask.sum())

    return {"start_s": start_s, **timed(call, repeats), "log_probs": scores}


def child(args) -> None:
    import torch
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    rows = sequences(AutoTokenizer.from_pretrained(args.model), args.batch, args.prompt_tokens, args.response_tokens)
    run = {"engine": engine_case, "plain": plain_case}[args.child]
    result = run(args.model, rows, args.repeats, args.micro_tokens)
    result["context_tokens_mean"] = statistics.mean(len(c) for c, _ in rows)
    Path(args.result).write_text(json.dumps({"case": args.child, **result}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(TEACHER), help="the teacher's folder (default: the 1.5B of the real pair)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=640)
    p.add_argument("--response-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--micro-tokens", type=int, default=16384, help="the engine's tokens per micro-batch")
    p.add_argument("--name", default="teacher_pass_speed")
    p.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    if args.child:
        child(args)
        return
    shared = ["--model", args.model, "--batch", str(args.batch), "--prompt-tokens", str(args.prompt_tokens)]
    shared += ["--response-tokens", str(args.response_tokens), "--repeats", str(args.repeats)]
    shared += ["--micro-tokens", str(args.micro_tokens)]
    cases = {case: run_case([sys.executable, __file__, *shared, "--child", case], case) for case in CASES}
    report = {
        "model": args.model,
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "response_tokens": args.response_tokens,
        "micro_tokens": args.micro_tokens,
        "cases": {case: {k: v for k, v in result.items() if k != "log_probs"} for case, result in cases.items()},
    }
    if all("tokens_per_s" in result for result in cases.values()):
        engine, plain = cases["engine"], cases["plain"]
        report["engine_over_plain"] = engine["tokens_per_s"] / plain["tokens_per_s"]
        report["max_abs_diff"] = max(
            abs(a - b)
            for row_e, row_p in zip(engine["log_probs"], plain["log_probs"], strict=True)
            for a, b in zip(row_e, row_p, strict=True)
        )
    save_result(args.name, report)


if __name__ == "__main__":
    main()
