"""Teacher scoring that computes a shared context prefix once, many responses per packed forward.

The RAS passes of one response y score y after x_r and after each contrasting x_q; under the
role_last layout (`verl_masopd.tokens.context`) these contexts share the observation and p_t as a token
prefix s. A group is the requests of one response: s (their longest common prefix, at most
min |x_q| − 1 tokens, so that the last context token, which predicts y_1, is in every branch) and
the branches x_q = s ⊕ c_q form one tree row

    s ⊕ (c_1 ⊕ y) ⊕ (c_2 ⊕ y) ⊕ …

with position ids 0..|s|−1 on s and restarting at |s| on every branch. Tree rows are packed one
after another into rows of at most `max_batch_tokens` tokens and run with the sdpa_packed
attention (`platform.packed_attention`), which attends a segment starting at position p > 0 to
the first p keys of the last segment that started at 0 and causally to itself: each branch sees
exactly the keys and positions of s ⊕ c_q ⊕ y_<i, never another branch, without padding or a
dense mask. Then, with i_q the offset of branch q in the packed row,

    log π_T(y_i | x_q, y_<i) = log softmax(f(row))[i_q + |c_q| − 1 + i, y_i]

equals the full recomputation. Tokens computed per group: |s| + Σ_q (|c_q| + |y|); a κ = 1
masopd group costs (|s| + |c_r| + |c_q| + 2|y|) / (|s| + |c_r| + |y|) of opd's own-role pass.

Measured on the tiny teacher (benchmarks/teacher_cost.py, results/teacher_cost*.json): see the
`workflow.context_layout=role_last` paragraph of docs/performance.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from verl_masopd.platform.packed_attention import PACKED_SDPA
from verl_masopd.teacher.scoring import ScoreRequest, TopKScores


def prefix_groups(requests: Sequence[ScoreRequest]) -> list[list[int]]:
    """Indices of `requests` grouped by identical response, in first-seen order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(tuple(r.response_ids), []).append(i)
    return list(groups.values())


def shared_prefix_length(contexts: Sequence[Sequence[int]]) -> int:
    """|s| of a group: the common prefix of its contexts, leaving at least one token of each; 0 for one context."""
    if len(contexts) < 2:
        return 0
    return min(len(os.path.commonprefix([list(c) for c in contexts])), min(len(c) for c in contexts) - 1)


@dataclass
class TreeRow:
    """One group's tree row: tokens, position ids and, per request, the row index of the logit that
    predicts its first response token."""

    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    first_logit: dict[int, int] = field(default_factory=dict)


def tree_row(requests: Sequence[ScoreRequest], group: Sequence[int]) -> TreeRow:
    """s ⊕ (c_q ⊕ y)… for the requests `group` of one response (see the module docstring)."""
    shared = shared_prefix_length([requests[i].context_ids for i in group])
    row = TreeRow()
    row.tokens.extend(requests[group[0]].context_ids[:shared])
    row.positions.extend(range(shared))
    for i in group:
        r = requests[i]
        tokens = list(r.context_ids[shared:]) + list(r.response_ids)
        row.first_logit[i] = len(row.tokens) + len(r.context_ids) - shared - 1
        row.tokens.extend(tokens)
        row.positions.extend(range(shared, shared + len(tokens)))
    return row


def packed_batches(rows: Sequence[TreeRow], max_batch_tokens: int) -> list[list[int]]:
    """Indices of `rows` in order, cut so that a batch holds ≤ `max_batch_tokens` tokens (one row at least)."""
    batches: list[list[int]] = []
    total = 0
    for k, row in enumerate(rows):
        if batches and total + len(row.tokens) <= max_batch_tokens:
            batches[-1].append(k)
            total += len(row.tokens)
        else:
            batches.append([k])
            total = len(row.tokens)
    return batches


def _forward(
    model, requests: Sequence[ScoreRequest], rows: Sequence[TreeRow], device, topk: int
) -> dict[int, list[float] | TopKScores]:
    """Response log-probs of every request in `rows` (with the top `topk` when > 0), the rows packed
    one after another into one forward."""
    tokens, positions, first_logit = [], [], {}
    for row in rows:
        first_logit.update({q: len(tokens) + first for q, first in row.first_logit.items()})
        tokens.extend(row.tokens)
        positions.extend(row.positions)
    wanted = sorted({first + i for q, first in first_logit.items() for i in range(len(requests[q].response_ids))})
    column = {index: c for c, index in enumerate(wanted)}
    logits = model(
        input_ids=torch.tensor([tokens], device=device),
        position_ids=torch.tensor([positions], device=device),
        use_cache=False,
        logits_to_keep=torch.tensor(wanted, device=device),
    ).logits[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    scores = {}
    for q, first in first_logit.items():
        y = requests[q].response_ids
        cols = torch.tensor([column[first + i] for i in range(len(y))], device=log_probs.device)
        sampled = log_probs[cols].gather(-1, torch.tensor(y, device=log_probs.device)[:, None])[:, 0].tolist()
        if topk:
            top = log_probs[cols].topk(topk, dim=-1)
            scores[q] = TopKScores(sampled, top.indices.tolist(), top.values.tolist())
        else:
            scores[q] = sampled
    return scores


@torch.no_grad()
def score_with_shared_prefix(
    model,
    requests: Sequence[ScoreRequest],
    device="cpu",
    autocast_dtype: torch.dtype = torch.float32,
    max_batch_tokens: int = 16384,
    topk: int = 0,
    share: bool = True,
) -> tuple[list[list[float]] | list[TopKScores], int]:
    """(log π_T(y_i | x_q, y_<i) per request, tokens run through `model`) for an HF causal LM with
    the sdpa_packed attention; with `topk` > 0 each request's scores are `TopKScores` (the top k of
    the same log-softmax rows). share=False: every request its own row (packed, no shared prefix)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if attention != PACKED_SDPA:
        raise ValueError(
            f"shared-prefix scoring needs the {PACKED_SDPA!r} attention (a branch attends to its root's prefix); "
            f"the teacher runs {attention!r}"
        )
    groups = prefix_groups(requests) if share else [[i] for i in range(len(requests))]
    rows = [tree_row(requests, group) for group in groups]
    scores: dict[int, list[float]] = {}
    autocast = (
        nullcontext()
        if autocast_dtype == torch.float32
        else torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype)
    )
    with autocast:
        for batch in packed_batches(rows, max_batch_tokens):
            scores.update(_forward(model, requests, [rows[k] for k in batch], device, topk))
    return [scores[i] for i in range(len(requests))], sum(len(row.tokens) for row in rows)
