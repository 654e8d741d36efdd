"""Teacher scoring that computes a shared context prefix once and reuses its key/value cache.

The RAS passes of one response y score y after x_r and after each contrasting x_q; under the
role_last layout (`verl_masopd.context`) these contexts share the observation and p_t as a token
prefix s. A group is the requests of one response: s (their longest common prefix, at most
min |x_q| − 1 tokens, so that the last context token, which predicts y_1, is computed with the rest)
is run once with a key/value cache, then every x_q = s ⊕ c_q is finished by running c_q ⊕ y on the
cache at positions |s|, |s| + 1, ...:

    log π_T(y_i | x_q, y_<i) = log softmax(f(c_q ⊕ y | cache(s)))[|c_q| − 1 + i, y_i]

which equals the full recomputation (causal attention: the prefix's keys and values do not depend
on what follows). Tokens computed per group: |s| + Σ_q (|c_q| + |y|).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext

import torch

from verl_masopd.teacher.scoring import ScoreRequest


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


def _response_log_probs(logits: torch.Tensor, response_ids: Sequence[int]) -> list[float]:
    """Log-probs of `response_ids` from the logits of the rows that predict them (the last |y| + 1 rows)."""
    rows = torch.log_softmax(logits[0, -len(response_ids) - 1 : -1].float(), dim=-1)
    return rows.gather(-1, torch.tensor(response_ids, device=rows.device)[:, None])[:, 0].tolist()


@torch.no_grad()
def score_with_shared_prefix(
    model, requests: Sequence[ScoreRequest], device="cpu", autocast_dtype: torch.dtype = torch.float32
) -> tuple[list[list[float]], int]:
    """(log π_T(y_i | x_q, y_<i) per request, tokens run through `model`) for an HF causal LM."""
    scores: list[list[float] | None] = [None] * len(requests)
    computed = 0
    autocast = (
        nullcontext()
        if autocast_dtype == torch.float32
        else torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype)
    )
    with autocast:
        for group in prefix_groups(requests):
            shared = shared_prefix_length([requests[i].context_ids for i in group])
            cache = None
            if shared:
                prefix = torch.tensor([requests[group[0]].context_ids[:shared]], device=device)
                cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
                computed += shared
            for i in group:
                r = requests[i]
                tokens = list(r.context_ids[shared:]) + list(r.response_ids)
                positions = torch.arange(shared, shared + len(tokens), device=device)[None]
                out = model(
                    input_ids=torch.tensor([tokens], device=device),
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=cache is not None,
                    logits_to_keep=len(r.response_ids) + 1,
                )
                scores[i] = _response_log_probs(out.logits, r.response_ids)
                computed += len(tokens)
                if cache is not None:
                    cache.crop(shared)
    return scores, computed
