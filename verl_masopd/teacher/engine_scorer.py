"""The engine teacher scorer: verl's engine holding the teacher weights (`trainer.engine.PolicyEngine`,
forward-only), on CPU and GPU.

A pass is one `infer_batch` over the per-policy layout with the teacher contexts x_q as prompts
(left-padded) and the students' responses (right-padded): the engine returns
log π_T(y_i | x_q, y_<i) on response position i, whatever |x_q| is.

With `share_prefix` (off by default) the requests of one response, which `TeacherScoring` sends
together, are instead scored as one tree row: their common context prefix once, then each
context's remainder and the response as a branch under a tree attention mask, several rows per
padded forward (`teacher.prefix_scoring`; needs the sdpa or sdpa_packed attention, not
flash-attention). benchmarks/teacher_cost.py measures it against the packed pass.
`computed_tokens` counts the tokens the last `score` ran through the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from verl import DataProto

from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.trainer.engine import PolicyEngine


def scoring_batch(requests: Sequence[ScoreRequest], pad_id: int) -> DataProto:
    """prompts ‖ responses rows for `requests`: left-padded contexts, right-padded responses."""
    B = len(requests)
    P = max(len(r.context_ids) for r in requests)
    R = max(len(r.response_ids) for r in requests)
    prompts = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    responses = torch.full((B, R), pad_id, dtype=torch.long)
    response_mask = torch.zeros((B, R), dtype=torch.long)
    for b, r in enumerate(requests):
        prompts[b, P - len(r.context_ids) :] = torch.tensor(r.context_ids, dtype=torch.long)
        prompt_mask[b, P - len(r.context_ids) :] = 1
        responses[b, : len(r.response_ids)] = torch.tensor(r.response_ids, dtype=torch.long)
        response_mask[b, : len(r.response_ids)] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0),
            "response_mask": response_mask,
        }
    )


class EngineTeacherScorer:
    """TeacherScorer over a forward-only `PolicyEngine` with the teacher's weights."""

    def __init__(self, engine: PolicyEngine, pad_id: int, share_prefix: bool = False):
        self.engine = engine
        self.pad_id = pad_id
        self.shares_prefixes = share_prefix
        self.computed_tokens = 0

    async def score(self, requests: Sequence[ScoreRequest]) -> list[list[float]]:
        if not requests:
            self.computed_tokens = 0
            return []
        if self.shares_prefixes:
            scores, self.computed_tokens = self.engine.score_shared_prefix(requests)
            return scores
        log_probs = self.engine.infer_batch(scoring_batch(requests, self.pad_id))
        self.computed_tokens = sum(len(r.context_ids) + len(r.response_ids) for r in requests)
        return [log_probs[b, : len(r.response_ids)].tolist() for b, r in enumerate(requests)]
