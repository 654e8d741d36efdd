"""Continuous batching for the HF backend: a request queue per model and step-wise decoding whose
finished rows leave the batch.

Requests wait in a queue. A batch takes the requests waiting (those that share the first one's
temperature, top-p and top-k, at most `max_batch_size` rows) and, before every decoding step,
admits those that arrived since: new rows are prefilled left-padded, with position ids counted
over each row's own tokens as HF's `generate` does, and their KV cache joins the batch's (the
shorter side padded on the left with masked zeros). Then one token per row and step is decoded
with the cache. A row leaves the batch (its cache rows dropped) as soon as it generates an eos
id, completes one of its stop strings or reaches its own `max_new_tokens`, so no step computes a
finished row (and the leading columns that only finished rows used are cut from the cache); rows
of one batch may differ in `max_new_tokens` and stop strings. The model lock
is held per step, so the batches of several backends (policies) take turns step by step.

A weight update (`held`) never lands inside a reply: while one is pending the batch in flight
admits no new rows, the update waits until its live rows have finished, and the waiting rows
(those queued before the update and after) start in a batch on the new weights. So every reply,
and the KV cache it is decoded on, comes from one weight version, the one recorded on it
(`Generation.version`: the version when the row was admitted). The wait is bounded by the longest
reply in flight (its `max_new_tokens` steps): decoding needs only the model lock, which the update
does not hold while it waits.

Per row and step, with logits z (float32): scores s = z / T, then HF's top-k and top-p warpers
(the processors `generate` applies, in its order); the recorded log-prob is log_softmax(s)[y]
(the processed distribution, as the HF backend's other path); y is drawn from softmax(s) by the
row's own `torch.Generator`, seeded by its request's seed(index in the call, version) when it is
admitted, so a row's tokens do not depend on the batch it ran in. Greedy (T <= 0): y = argmax z
and the log-prob is log_softmax(z)[y].
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from verl_masopd.rollout.backend import Generation, SamplingParams
from verl_masopd.rollout.records import LENGTH, STOP
from verl_masopd.tokens.layout import left_padded


@dataclass
class _Row:
    prompt: list[int]
    sampling: SamplingParams
    seed: Callable[[int], int]  # the row's sampling seed given the weight version that decodes it
    future: Future
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    generator: torch.Generator | None = None
    version: int = 0


@dataclass
class DecodeStats:
    """`batches`: batches run; `joined`: rows admitted into a batch that had rows decoding;
    `steps`: forward passes after the prefills; `row_steps`: rows those passes computed (Σ over
    steps of the rows still in the batch)."""

    batches: int = 0
    joined: int = 0
    steps: int = 0
    row_steps: int = 0


class ContinuousBatcher:
    """Serves `generate` calls of one model from one queue; a thread decodes while requests wait.

    `completes_stop(tokens, stop)`: whether the generated `tokens` contain a stop string; `lock`
    is held while a batch runs (the HF backends of a process compute one at a time); `version()`:
    the version of the weights the model holds."""

    def __init__(
        self,
        model,
        pad_id: int,
        eos_ids: list[int],
        completes_stop: Callable[[list[int], tuple[str, ...]], bool],
        lock: threading.Lock,
        max_batch_size: int,
        version: Callable[[], int],
    ):
        self.model = model
        self.pad_id = pad_id
        self.eos_ids = set(eos_ids)
        self.completes_stop = completes_stop
        self.lock = lock
        self.max_batch_size = max_batch_size
        self.version = version
        self.stats = DecodeStats()
        self._waiting: list[_Row] = []
        self._guard = threading.Lock()
        self._changed = threading.Condition(self._guard)
        self._draining = False
        self._in_flight = False  # a batch is decoding
        self._updates = 0  # weight updates pending or loading

    async def generate(
        self, prompts: list[list[int]], seed: Callable[[int, int], int], sampling: SamplingParams
    ) -> list[Generation]:
        """One `Generation` per prompt, in order; prompt i is sampled with the seed `seed(i, version)`,
        version the one of the weights that decode it."""
        if any(not p for p in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        rows = [_Row(list(p), sampling, partial(seed, i), Future()) for i, p in enumerate(prompts)]
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

    @contextmanager
    def held(self) -> Iterator[None]:
        """Between batches (module doc): the batch in flight admits no new rows and finishes; no
        batch starts until the block (a weight update) ends."""
        with self._changed:
            self._updates += 1
            self._changed.wait_for(lambda: not self._in_flight)
        try:
            yield
        finally:
            with self._changed:
                self._updates -= 1
                self._changed.notify_all()

    def _drain(self) -> None:
        """Run batches until nothing waits, each once no update is pending."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: not self._updates)
                if not self._waiting:
                    self._draining = False
                    return
                self._in_flight = True
            try:
                self._run()
            finally:
                with self._changed:
                    self._in_flight = False
                    self._changed.notify_all()

    def _take(self, kind: tuple | None, room: int) -> list[_Row]:
        """Up to `room` waiting rows of sampling `kind` (None: the first waiting row's), in order."""
        if kind is None and self._waiting:
            kind = _kind(self._waiting[0].sampling)
        batch = [r for r in self._waiting if _kind(r.sampling) == kind][:room]
        taken = {id(r) for r in batch}
        self._waiting = [r for r in self._waiting if id(r) not in taken]
        return batch

    @torch.no_grad()
    def _run(self) -> None:
        """One batch: admit what waits (nothing while an update is pending), sample a token per
        live row, drop finished rows, decode a step; until no row is live and no row of the batch's
        sampling is admitted. The model lock is held per step, so the batches of several backends
        take turns step by step."""
        live: list[_Row] = []
        new: list[_Row] = []
        kind = cache = mask = next_position = logits = None
        try:
            while True:
                with self._guard:
                    new = [] if self._updates else self._take(kind, self.max_batch_size - len(live))
                if not new and not live:
                    return
                with self.lock:
                    if new:
                        kind = _kind(new[0].sampling)
                        self.stats.batches += not live
                        self.stats.joined += len(new) if live else 0
                        cache, mask, next_position, logits = self._admit(new, cache, mask, next_position, logits)
                        live += new
                    keep = self._sample(live, logits)
                    if not keep:
                        live, cache = [], None
                        continue
                    if len(keep) < len(live):
                        index = torch.tensor(keep)
                        cache.batch_select_indices(index)
                        mask, next_position = mask[index], next_position[index]
                        live = [live[j] for j in keep]
                        mask = _trimmed(cache, mask)
                    tokens = torch.tensor([[row.tokens[-1]] for row in live])
                    mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
                    logits = self._forward(tokens, mask, next_position, cache)
                    next_position = next_position + 1
                    self.stats.steps += 1
                    self.stats.row_steps += len(live)
        except BaseException as e:  # the callers get the error; the queue goes on
            for row in live + new:
                if not row.future.done():
                    row.future.set_exception(e)

    def _admit(self, new: list[_Row], cache, mask, next_position, logits):
        """Prefill `new` (left-padded, position ids counted over each row's own tokens, as HF's
        `generate`) and append its rows to the batch's: the shorter side's cache and mask get
        zeros (masked) on the left."""
        version = self.version()
        for row in new:
            row.version = version
            row.generator = torch.Generator().manual_seed(row.seed(version))
        ids, new_mask = left_padded([r.prompt for r in new], self.pad_id)
        positions = (new_mask.cumsum(-1) - 1).masked_fill(new_mask == 0, 1)
        new_cache = DynamicCache()
        new_logits = self._forward(ids, new_mask, positions, new_cache)
        new_next = new_mask.sum(-1, keepdim=True)
        if cache is None:
            return new_cache, new_mask, new_next, new_logits
        width = max(mask.shape[1], new_mask.shape[1])
        for layer, added in zip(cache.layers, new_cache.layers, strict=True):
            layer.keys = torch.cat([_left_padded(layer.keys, width), _left_padded(added.keys, width)])
            layer.values = torch.cat([_left_padded(layer.values, width), _left_padded(added.values, width)])
        mask = torch.cat([_left_padded(mask, width, dim=1), _left_padded(new_mask, width, dim=1)])
        return cache, mask, torch.cat([next_position, new_next]), torch.cat([logits, new_logits])

    def _sample(self, live: list[_Row], logits: torch.Tensor) -> list[int]:
        """Draw each live row's next token; returns the indices of the rows that go on."""
        sampling = live[0].sampling
        greedy = sampling.temperature <= 0
        scores = logits if greedy else _processed(logits, sampling.temperature, _warpers(sampling))
        log_probs = scores.log_softmax(-1)
        if greedy:
            tokens = scores.argmax(-1)
        else:
            probs = scores.softmax(-1)
            tokens = torch.cat([torch.multinomial(probs[j], 1, generator=row.generator) for j, row in enumerate(live)])
        token_log_probs = log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()
        keep = []
        for j, row in enumerate(live):
            token = int(tokens[j])
            row.tokens.append(token)
            row.log_probs.append(token_log_probs[j])
            finish = self._finish(row, token)
            if finish is None:
                keep.append(j)
            else:
                row.future.set_result(Generation(row.tokens, row.log_probs, finish, row.version))
        return keep

    def _forward(self, input_ids, mask, positions, cache) -> torch.Tensor:
        """The next-token logits of each row: the vocabulary projection of the last position only
        (a prefill of B rows × L tokens would otherwise hold B·L·V logits)."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
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


def _kind(sampling: SamplingParams) -> tuple:
    """What the rows of one batch share: the processing of their scores."""
    return sampling.temperature, sampling.top_p, sampling.top_k


def _left_padded(t: torch.Tensor, width: int, dim: int = -2) -> torch.Tensor:
    """`t` with zeros added on the left of `dim` up to `width`."""
    missing = width - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _trimmed(cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
    """Drop the leading columns no live row attends to (padding left by rows that finished)."""
    first = int(mask.any(0).nonzero()[0])
    if first == 0:
        return mask
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., first:, :], layer.values[..., first:, :]
    return mask[:, first:]
