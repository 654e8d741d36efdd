"""A `GenerationBackend` over HF transformers `generate`, for CPU runs, tests and small models.

Prompts are batched with left padding. Sampling uses temperature, top-k then top-p (HF's
processors; temperature 0 means greedy). The returned log-prob of each token is taken from the
PROCESSED distribution the token was drawn from: log_softmax of the logits after temperature
scaling and top-k/top-p filtering (renormalised over the kept tokens). With the training
defaults (T 1, top-p 1, top-k −1) that is exactly log π_θ(y_k | u, y_<k). Under greedy decoding
it is the log-prob of the unscaled distribution.

Generation stops at any eos id of the model's generation config or tokenizer; the eos token is
kept in the response with its log-prob (finish_reason "stop"); a response that hits
`max_new_tokens` first ends with finish_reason "length". With `sampling.stop` strings (tool
calls), HF's stop-string criterion ends a row, and the response is cut after the first token
whose decoded prefix contains a stop string (finish_reason "stop"): that token is kept whole, as
vLLM keeps its id, even where it reaches past the string; the tool loop cuts the segment at the
string (rollout/tool_loop.py).

A call whose sampling has no seed (the lockstep rollout) is generated as above, one call at a time.
A seeded call (the rollout without a turn barrier, backend.py) joins the backend's request queue
instead: the requests waiting when the model is free form a batch, decoded step by step with
finished rows leaving it, each row sampled from a generator seeded by request_seed(backend seed,
weight version, request seed, index in the call) (rollout/hf_batching.py). A weight update waits
for the batch in flight to finish and holds the waiting requests until it has loaded, so each
reply is decoded by one weight version, which its `Generation.version` records.
"""

from __future__ import annotations

import asyncio
import threading

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_masopd.rollout.backend import Generation, SamplingParams, request_seed
from verl_masopd.rollout.hf_batching import ContinuousBatcher
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.tokens.layout import left_padded


class HFBackend:
    """Generates with one HF causal LM; `update_weights` loads a new state dict in place.

    Sampling seeds torch's process-wide generator, so all HF backends of a process generate one
    at a time (`_lock` is shared): several policies' backends then sample reproducibly.
    """

    _lock = threading.Lock()

    def __init__(self, model_path: str, *, dtype: torch.dtype = torch.float32, seed: int = 0, max_batch_size: int = 64):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self.eos_ids = _eos_ids(self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id)
        if not self.eos_ids:
            raise ValueError(f"{model_path}: neither the generation config nor the tokenizer names an eos token")
        self.max_batch_size = max_batch_size
        self.version = 0
        self.seed = seed
        self._calls = 0
        self.batcher = ContinuousBatcher(
            self.model,
            self.pad_id,
            self.eos_ids,
            self._completes_stop,
            self._lock,
            max_batch_size,
            lambda: self.version,
        )

    async def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        if sampling.seed is not None:

            def seed(index: int, version: int) -> int:
                return request_seed(self.seed, version, sampling.seed, index)

            return await self.batcher.generate(prompts, seed, sampling)
        return await asyncio.to_thread(self.generate_sync, prompts, sampling)

    def generate_sync(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        with self._lock:
            for start in range(0, len(prompts), self.max_batch_size):
                out.extend(self._generate_batch(prompts[start : start + self.max_batch_size], sampling))
        return out

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load `state_dict` (HF parameter names, strict) and record the weight `version`.

        Sampling after an update depends only on (seed, version, calls since the update), so a
        run resumed from a checkpoint samples exactly what the uninterrupted run sampled. The load
        waits for the continuous batch in flight to finish (rollout/hf_batching.py).
        """
        with self.batcher.held(), self._lock:
            self.model.load_state_dict(state_dict, strict=True)
            self.version = version
            self._calls = 0

    @torch.no_grad()
    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        input_ids, attention_mask = left_padded(prompts, self.pad_id)
        width = input_ids.shape[1]
        greedy = sampling.temperature <= 0
        sampling_kwargs = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k if sampling.top_k > 0 else 0,
            }
        )
        self._calls += 1
        # Sampling draws from torch's global generator: seed it per call, without disturbing its state outside.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((self.seed * 1_000_003 + self.version) * 1_000_033 + self._calls)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=sampling.max_new_tokens,
                eos_token_id=self.eos_ids,
                pad_token_id=self.pad_id,
                output_scores=True,
                return_dict_in_generate=True,
                **sampling_kwargs,
                **({"stop_strings": list(sampling.stop), "tokenizer": self.tokenizer} if sampling.stop else {}),
            )
        new_tokens = output.sequences[:, width:]
        log_probs = torch.stack(output.scores, dim=1).float().log_softmax(dim=-1)
        token_log_probs = log_probs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [
            self._cut(new_tokens[b].tolist(), token_log_probs[b].tolist(), sampling.stop) for b in range(len(prompts))
        ]

    def _cut(self, tokens: list[int], log_probs: list[float], stop: tuple[str, ...]) -> Generation:
        """Keep the response up to and including its first eos, or the token that completes a stop string."""
        for i, token in enumerate(tokens):
            if token in self.eos_ids or (stop and self._completes_stop(tokens[: i + 1], stop)):
                return Generation(tokens[: i + 1], log_probs[: i + 1], STOP)
        return Generation(tokens, log_probs, LENGTH)

    def _completes_stop(self, tokens: list[int], stop: tuple[str, ...]) -> bool:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return any(s in text for s in stop)


def _eos_ids(*sources) -> list[int]:
    ids: list[int] = []
    for source in sources:
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if i is not None and i not in ids:
                ids.append(int(i))
    return ids
