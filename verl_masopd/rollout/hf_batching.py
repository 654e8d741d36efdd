"""Continuous batching for the HF backend: a request queue per model and step-wise decoding whose
finished rows leave the batch.

Requests wait in a queue; whenever the model is free, the requests waiting form the next batch
(those that share the first one's temperature, top-p and top-k, at most `max_batch_size`). The
batch is prefilled left-padded, with position ids counted over each row's own tokens as HF's
`generate` does, then decoded one token per step with a KV cache. A row leaves the batch (its
cache rows dropped) as soon as it generates an eos id, completes one of its stop strings or
reaches its own `max_new_tokens`, so no step computes a finished row; rows of one batch may
differ in `max_new_tokens` and stop strings.

Per row and step, with logits z (float32): scores s = z / T, then HF's top-k and top-p warpers
(the processors `generate` applies, in its order); the recorded log-prob is log_softmax(s)[y]
(the processed distribution, as the HF backend's other path); y is drawn from softmax(s) by the
row's own `torch.Generator`, seeded by the request, so a row's tokens do not depend on the batch
it ran in. Greedy (T <= 0): y = argmax z and the log-prob is log_softmax(z)[y].
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.token_layout import left_padded


@dataclass
class _Row:
    prompt: list[int]
    sampling: SamplingParams
    seed: int
    future: Future
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)


@dataclass
class DecodeStats:
    """`batches`: batches run; `steps`: forward passes after the prefill; `row_steps`: rows those
    passes computed (Σ over steps of the rows still in the batch)."""

    batches: int = 0
    steps: int = 0
    row_steps: int = 0


class ContinuousBatcher:
    """Serves `generate` calls of one model from one queue; a thread decodes while requests wait.

    `completes_stop(tokens, stop)`: whether the generated `tokens` contain a stop string; `lock`
    is held while a batch runs (the HF backends of a process compute one at a time)."""

    def __init__(
        self,
        model,
        pad_id: int,
        eos_ids: list[int],
        completes_stop: Callable[[list[int], tuple[str, ...]], bool],
        lock: threading.Lock,
        max_batch_size: int,
    ):
        self.model = model
        self.pad_id = pad_id
        self.eos_ids = set(eos_ids)
        self.completes_stop = completes_stop
        self.lock = lock
        self.max_batch_size = max_batch_size
        self.stats = DecodeStats()
        self._waiting: list[_Row] = []
        self._guard = threading.Lock()
        self._draining = False

    async def generate(self, prompts: list[list[int]], seeds: list[int], sampling: SamplingParams) -> list[Generation]:
        """One `Generation` per prompt, in order; prompt i is sampled with `seeds[i]`."""
        if any(not p for p in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        rows = [_Row(list(p), sampling, seed, Future()) for p, seed in zip(prompts, seeds, strict=True)]
        with self._guard:
            self._waiting.extend(rows)
        # after the tasks already due on this loop (the other agents of a turn) have queued theirs
        asyncio.get_running_loop().call_soon(self._start)
        return list(await asyncio.gather(*(asyncio.wrap_future(r.future) for r in rows)))

    def _start(self) -> None:
        with self._guard:
            if self._draining or not self._waiting:
                return
            self._draining = True
        threading.Thread(target=self._drain, name="hf-batching", daemon=True).start()

    def _drain(self) -> None:
        """Run batches of what waits until nothing does."""
        while True:
            with self._guard:
                if not self._waiting:
                    self._draining = False
                    return
                batch = self._take()
            try:
                with self.lock:
                    self._decode(batch)
            except BaseException as e:  # the callers get the error; the queue goes on
                for row in batch:
                    if not row.future.done():
                        row.future.set_exception(e)

    def _take(self) -> list[_Row]:
        first = self._waiting[0].sampling
        kind = (first.temperature, first.top_p, first.top_k)
        batch = [r for r in self._waiting if (r.sampling.temperature, r.sampling.top_p, r.sampling.top_k) == kind]
        batch = batch[: self.max_batch_size]
        taken = {id(r) for r in batch}
        self._waiting = [r for r in self._waiting if id(r) not in taken]
        return batch

    @torch.no_grad()
    def _decode(self, batch: list[_Row]) -> None:
        sampling = batch[0].sampling
        greedy = sampling.temperature <= 0
        warpers = [] if greedy else _warpers(sampling)
        generators = [torch.Generator().manual_seed(r.seed) for r in batch]
        input_ids, mask = left_padded([r.prompt for r in batch], self.pad_id)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        cache = DynamicCache()
        logits = self._forward(input_ids, mask, positions, cache)
        next_position = mask.sum(-1, keepdim=True)
        live = list(range(len(batch)))  # indices into `batch` of the rows in the cache, in cache order
        self.stats.batches += 1
        while True:
            scores = logits if greedy else _processed(logits, sampling.temperature, warpers)
            log_probs = scores.log_softmax(-1)
            if greedy:
                tokens = scores.argmax(-1)
            else:
                probs = scores.softmax(-1)
                tokens = torch.cat([torch.multinomial(probs[j], 1, generator=generators[b]) for j, b in enumerate(live)])
            token_log_probs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()
            keep = []
            for j, b in enumerate(live):
                row, token = batch[b], int(tokens[j])
                row.tokens.append(token)
                row.log_probs.append(token_log_probs[j])
                finish = self._finish(row, token)
                if finish is None:
                    keep.append(j)
                else:
                    row.future.set_result(Generation(row.tokens, row.log_probs, finish))
            if not keep:
                return
            if len(keep) < len(live):
                index = torch.tensor(keep)
                cache.batch_select_indices(index)
                mask, next_position, tokens = mask[index], next_position[index], tokens[index]
                live = [live[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
            logits = self._forward(tokens.unsqueeze(-1), mask, next_position, cache)
            next_position = next_position + 1
            self.stats.steps += 1
            self.stats.row_steps += len(live)

    def _forward(self, input_ids, mask, positions, cache) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )
        return out.logits[:, -1, :].float()

    def _finish(self, row: _Row, token: int) -> str | None:
        if token in self.eos_ids or (row.sampling.stop and self.completes_stop(row.tokens, row.sampling.stop)):
            return STOP
        if len(row.tokens) >= row.sampling.max_new_tokens:
            return LENGTH
        return None


def _warpers(sampling: SamplingParams) -> list:
    """HF's top-k and top-p warpers as `generate` builds them for these settings."""
    out = []
    if sampling.top_k > 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p))
    return out


def _processed(logits: torch.Tensor, temperature: float, warpers: list) -> torch.Tensor:
    scores = logits / temperature if temperature != 1.0 else logits
    for warper in warpers:
        scores = warper(None, scores)
    return scores
