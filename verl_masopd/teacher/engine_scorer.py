"""The engine teacher scorer: verl's engine holding the teacher weights, forward-only, on CPU and GPU.

The scorer depends on `LogProbEngine`, the two calls it makes; the trainer's `PolicyEngine`
(forward-only) provides them.

A pass is one `infer_batch` over the per-policy layout with the teacher contexts x_q as prompts
(left-padded) and the students' responses (right-padded): the engine returns
log π_T(y_i | x_q, y_<i) on response position i, whatever |x_q| is.

With `share_prefix` (`teacher.share_prefix`, which the trainer turns on on CPU by default) the
requests of one response, which `TeacherScoring` sends together, are instead scored as one tree
row: their common context prefix once, then each context's remainder and the response as a
branch that attends to the prefix, many rows per packed forward (`teacher.prefix_scoring`; needs
the sdpa_packed attention the engine runs on CPU, not flash-attention). benchmarks/teacher_cost.py
measures it against the packed pass.
`computed_tokens` counts the tokens the last `score` ran through the model. The engine's calls run
in a thread, so the event loop goes on serving the rollout while the teacher computes (scoring as
episodes finish, `teacher/overlap.py`).

`score_topk` (the top-k distillation modes) runs the packed forward of `teacher.prefix_scoring`
whether or not prefixes are shared (each request its own row without `share_prefix`): it reads
the teacher's whole log-softmax row at every response position, which `infer_batch` does not
return. It needs the sdpa_packed attention too.

`AdapterOff` is the `LogProbEngine` of teacher.backend=lora_base: a LoRA policy's engine with
its adapter off, so the teacher is the policy's base model and needs no second copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import torch
from verl import DataProto

from verl_masopd.teacher.scoring import ScoreRequest, TopKScores
from verl_masopd.tokens.layout import prompt_response_tensors


class LogProbEngine(Protocol):
    """What the teacher scorer needs of a model engine."""

    def infer_batch(self, batch: DataProto) -> torch.Tensor:
        """log π(responses[b, i] | prompts[b], responses[b, <i]) [B, R], 0 on padding."""

    def score_shared_prefix(
        self, requests: Sequence[ScoreRequest], topk: int = 0, share: bool = True
    ) -> tuple[list, int]:
        """Per request, its response's log-probs (`TopKScores` with `topk` > 0), scoring each common
        context prefix once (share=False: each request alone, packed); and the number of tokens
        run through the model."""


class AdapterOff:
    """The base model of a LoRA policy's engine: its calls with the adapter turned off."""

    def __init__(self, engine):
        self.engine = engine

    def infer_batch(self, batch: DataProto) -> torch.Tensor:
        return self.engine.infer_batch(batch, adapter=False)

    def score_shared_prefix(
        self, requests: Sequence[ScoreRequest], topk: int = 0, share: bool = True
    ) -> tuple[list, int]:
        return self.engine.score_shared_prefix(requests, adapter=False, topk=topk, share=share)


def scoring_batch(requests: Sequence[ScoreRequest], pad_id: int) -> DataProto:
    """The rows of `requests` in the token layout (`verl_masopd.tokens.layout`): contexts as prompts."""
    return DataProto.from_dict(
        tensors=prompt_response_tensors([r.context_ids for r in requests], [r.response_ids for r in requests], pad_id)
    )


class EngineTeacherScorer:
    """TeacherScorer over a forward-only `LogProbEngine` with the teacher's weights."""

    def __init__(self, engine: LogProbEngine, pad_id: int, share_prefix: bool = False):
        self.engine = engine
        self.pad_id = pad_id
        self.shares_prefixes = share_prefix
        self.computed_tokens = 0

    async def score(self, requests: Sequence[ScoreRequest]) -> list[list[float]]:
        if not requests:
            self.computed_tokens = 0
            return []
        if self.shares_prefixes:
            scores, self.computed_tokens = await asyncio.to_thread(self.engine.score_shared_prefix, requests)
            return scores
        log_probs = await asyncio.to_thread(self.engine.infer_batch, scoring_batch(requests, self.pad_id))
        self.computed_tokens = sum(len(r.context_ids) + len(r.response_ids) for r in requests)
        return [log_probs[b, : len(r.response_ids)].tolist() for b, r in enumerate(requests)]

    async def score_topk(self, requests: Sequence[ScoreRequest], k: int) -> list[TopKScores]:
        if not requests:
            self.computed_tokens = 0
            return []
        scores, self.computed_tokens = await asyncio.to_thread(
            self.engine.score_shared_prefix, requests, topk=k, share=self.shares_prefixes
        )
        return scores
