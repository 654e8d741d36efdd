"""Attention over packed sequences at the cost of the sequences, not of the packed row.

verl's engine runs padding-free (`use_remove_padding`): a micro-batch of sequences s_1..s_n is
packed into one row of Σ|s_i| tokens whose position ids restart at 0 for every sequence, and
`attention_mask` is None. transformers' "sdpa" then builds a block-diagonal mask over the whole
row and attends over it: O((Σ|s_i|)²) time and memory, where the sequences need only Σ|s_i|².
flash-attention's varlen kernel avoids that on GPUs; it does not exist on CPUs.

"sdpa_packed" (registered with transformers' attention and mask interfaces when this module is
imported) finds the sequence boundaries from the position ids and runs causal SDPA on each
sequence alone, so the row costs Σ|s_i|². Anything else (a padding mask, a key/value cache,
several rows) goes to transformers' own sdpa unchanged. `packed_attention_implementation()`
names what the engine should use: flash-attention 2 where it is installed on a GPU, else this.

Branches (shared-prefix scoring, `teacher.prefix_scoring`): a segment whose positions start at
p > 0 continues the last segment that started at 0, its root: it attends to the root's first p
keys and causally to itself, as if it followed them, so that s ⊕ b_1 ⊕ b_2 … with positions
0..|s|−1, |s|.., |s|.. scores every branch b_q after the prefix s at the cost of |s| + Σ|b_q|
tokens. Sequences packed by the engine start at 0 and are never branches.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PACKED_SDPA = "sdpa_packed"

logger = logging.getLogger(__name__)


def sequence_bounds(position_ids: torch.Tensor) -> list[int]:
    """Start offsets of the packed sequences of one row, plus its length: [0, ..., N].

    A sequence starts at 0 and wherever the position does not follow the previous one by 1.
    """
    positions = position_ids.reshape(-1)
    starts = torch.nonzero(positions[1:] != positions[:-1] + 1).flatten() + 1
    return [0, *starts.tolist(), positions.numel()]


def _packed_row(attention_mask, query: torch.Tensor, key: torch.Tensor) -> bool:
    return attention_mask is None and query.shape[0] == 1 and query.shape[2] == key.shape[2] and query.shape[2] > 1


def packed_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [1, H, N, D], key/value [1, H_kv, N, D] -> [1, N, H, D]."""
    position_ids = kwargs.get("position_ids")
    if not _packed_row(attention_mask, query, key) or position_ids is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    bounds = sequence_bounds(position_ids)
    firsts = position_ids.reshape(-1)[bounds[:-1]].tolist()
    gqa = query.shape[1] != key.shape[1]
    outputs, root, root_length = [], 0, 0
    for start, end, first in zip(bounds[:-1], bounds[1:], firsts, strict=True):
        if first == 0:
            root, root_length = start, end - start
        keys, values, mask = key[:, :, start:end], value[:, :, start:end], None
        if first > 0:
            if first > root_length:
                raise ValueError(f"packed row: a branch at position {first} follows a root of {root_length} tokens")
            keys = torch.cat([key[:, :, root : root + first], keys], dim=2)
            values = torch.cat([value[:, :, root : root + first], values], dim=2)
            mask = torch.ones(end - start, first + end - start, dtype=torch.bool, device=query.device).tril(first)
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:end],
                keys,
                values,
                attn_mask=mask,
                dropout_p=dropout,
                scale=scaling,
                is_causal=mask is None,
                enable_gqa=gqa,
            )
        )
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def packed_sdpa_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0, **kwargs):
    """No mask for one packed row without a cache (the attention splits it), else sdpa's mask."""
    if batch_size == 1 and kwargs.get("attention_mask") is None and q_offset == 0 and kv_offset == 0:
        if q_length == kv_length:
            return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, **kwargs)


@functools.cache
def _warn_without_flash_attn() -> None:
    logger.warning(
        "flash-attn is not installed: attention runs as %s, slower on a GPU than flash_attention_2 "
        "(scripts/setup_gpu.sh installs flash-attn where it can be built)",
        PACKED_SDPA,
    )


def packed_attention_implementation() -> str:
    """flash_attention_2 on a CUDA device with flash-attn installed (its varlen kernel), else sdpa_packed.

    On a CUDA device without flash-attn (its build failed at set-up), a warning says so, once."""
    if torch.cuda.is_available():
        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
        _warn_without_flash_attn()
    return PACKED_SDPA


AttentionInterface.register(PACKED_SDPA, packed_sdpa_forward)
AttentionMaskInterface.register(PACKED_SDPA, packed_sdpa_mask)
