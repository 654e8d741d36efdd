"""Teacher scoring that computes a shared context prefix once, several responses per batched forward.

The RAS passes of one response y score y after x_r and after each contrasting x_q; under the
role_last layout (`verl_masopd.context`) these contexts share the observation and p_t as a token
prefix s. A group is the requests of one response: s (their longest common prefix, at most
min |x_q| − 1 tokens, so that the last context token, which predicts y_1, is in every branch) and
the branches x_q = s ⊕ c_q form one tree row

    s ⊕ (c_1 ⊕ y) ⊕ (c_2 ⊕ y) ⊕ …

with position ids 0..|s|−1 on s and restarting at |s| on every branch, and a tree attention mask:
a token of branch q attends to all of s and causally to its own branch, never to another branch.
Then, with i_q the offset of branch q in the row,

    log π_T(y_i | x_q, y_<i) = log softmax(f(row))[i_q + |c_q| − 1 + i, y_i]

equals the full recomputation (each branch sees exactly the keys and positions of s ⊕ c_q ⊕ y_<i).
Rows are sorted by length and padded into micro-batches of at most `max_batch_tokens` (rows ×
longest row); the mask goes to the model as a 4D boolean mask, which transformers' sdpa (and this
project's sdpa_packed, which hands masked batches to it) takes as is. Tokens computed per group:
|s| + Σ_q (|c_q| + |y|).

Measured on the tiny teacher (benchmarks/teacher_cost.py, results/teacher_cost.json): see the
README's `role_last` paragraph.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from verl_masopd.platform.packed_attention import PACKED_SDPA
from verl_masopd.teacher.scoring import ScoreRequest

MASKED_ATTENTION = ("sdpa", PACKED_SDPA)


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
    """One group's tree row: tokens, position ids, segment ids (0 on s, q + 1 on branch q) and, per
    request, the row index of the logit that predicts its first response token."""

    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    first_logit: dict[int, int] = field(default_factory=dict)


def tree_row(requests: Sequence[ScoreRequest], group: Sequence[int]) -> TreeRow:
    """s ⊕ (c_q ⊕ y)… for the requests `group` of one response (see the module docstring)."""
    shared = shared_prefix_length([requests[i].context_ids for i in group])
    row = TreeRow()
    row.tokens.extend(requests[group[0]].context_ids[:shared])
    row.positions.extend(range(shared))
    row.segments.extend([0] * shared)
    for branch, i in enumerate(group, start=1):
        r = requests[i]
        tokens = list(r.context_ids[shared:]) + list(r.response_ids)
        row.first_logit[i] = len(row.tokens) + len(r.context_ids) - shared - 1
        row.tokens.extend(tokens)
        row.positions.extend(range(shared, shared + len(tokens)))
        row.segments.extend([branch] * len(tokens))
    return row


def micro_batches(rows: Sequence[TreeRow], max_batch_tokens: int) -> list[list[int]]:
    """Indices of `rows`, by length, cut so that rows × the longest row ≤ `max_batch_tokens` (one row at least)."""
    order = sorted(range(len(rows)), key=lambda k: len(rows[k].tokens))
    batches: list[list[int]] = []
    for k in order:
        if batches and (len(batches[-1]) + 1) * len(rows[k].tokens) <= max_batch_tokens:
            batches[-1].append(k)
        else:
            batches.append([k])
    return batches


def tree_attention_mask(segments: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] boolean mask (True: attend) from [B, L] segment ids, −1 on padding.

    Query t (not padding) attends to key u ≤ t when u is on s (segment 0) or on t's own segment; a
    padding query attends to itself only, so that its softmax stays finite.
    """
    L = segments.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=segments.device).tril()
    keys, queries = segments[:, None, :], segments[:, :, None]
    visible = ((keys == 0) | (keys == queries)) & (keys >= 0) & (queries >= 0) & causal
    return (visible | torch.eye(L, dtype=torch.bool, device=segments.device))[:, None]


def _forward_rows(model, requests: Sequence[ScoreRequest], rows: Sequence[TreeRow], device) -> dict[int, list[float]]:
    """Response log-probs of every request in `rows`, one padded forward."""
    L = max(len(row.tokens) for row in rows)
    tokens = torch.zeros(len(rows), L, dtype=torch.long)
    positions = torch.zeros(len(rows), L, dtype=torch.long)
    segments = torch.full((len(rows), L), -1, dtype=torch.long)
    for b, row in enumerate(rows):
        n = len(row.tokens)
        tokens[b, :n] = torch.tensor(row.tokens)
        positions[b, :n] = torch.tensor(row.positions)
        segments[b, :n] = torch.tensor(row.segments)
    wanted = sorted(
        {
            first + i
            for row in rows
            for q, first in row.first_logit.items()
            for i in range(len(requests[q].response_ids))
        }
    )
    column = {index: c for c, index in enumerate(wanted)}
    logits = model(
        input_ids=tokens.to(device),
        position_ids=positions.to(device),
        attention_mask=tree_attention_mask(segments.to(device)),
        use_cache=False,
        logits_to_keep=torch.tensor(wanted, device=device),
    ).logits
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    scores = {}
    for b, row in enumerate(rows):
        for q, first in row.first_logit.items():
            y = requests[q].response_ids
            cols = torch.tensor([column[first + i] for i in range(len(y))], device=log_probs.device)
            scores[q] = log_probs[b, cols].gather(-1, torch.tensor(y, device=log_probs.device)[:, None])[:, 0].tolist()
    return scores


@torch.no_grad()
def score_with_shared_prefix(
    model,
    requests: Sequence[ScoreRequest],
    device="cpu",
    autocast_dtype: torch.dtype = torch.float32,
    max_batch_tokens: int = 16384,
) -> tuple[list[list[float]], int]:
    """(log π_T(y_i | x_q, y_<i) per request, tokens run through `model`) for an HF causal LM whose
    attention takes a 4D mask (sdpa, sdpa_packed)."""
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in MASKED_ATTENTION:
        raise ValueError(
            f"shared-prefix scoring needs an attention implementation that takes a 4D mask {MASKED_ATTENTION}; "
            f"the teacher runs {attention!r}"
        )
    rows = [tree_row(requests, group) for group in prefix_groups(requests)]
    scores: dict[int, list[float]] = {}
    autocast = (
        nullcontext()
        if autocast_dtype == torch.float32
        else torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype)
    )
    with autocast:
        for batch in micro_batches(rows, max_batch_tokens):
            scores.update(_forward_rows(model, requests, [rows[k] for k in batch], device))
    return [scores[i] for i in range(len(requests))], sum(len(row.tokens) for row in rows)
