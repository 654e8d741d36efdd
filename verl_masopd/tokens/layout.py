"""The token layout every batch of the project uses: prompts left-padded, responses right-padded.

For B rows, P = the longest prompt and R = the longest response:
  prompts [B, P]    pad … pad u_1 … u_n          (left-padded)
  responses [B, R]  y_1 … y_L pad … pad          (right-padded)
  input_ids = prompts ‖ responses; attention_mask 1 on real tokens; position_ids = running count
  of real tokens − 1 (0 on left padding); response_mask 1 on y.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [B, P] with each row at the right end, and its mask (1 on the row's tokens)."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[b, width - len(row) :] = 1
    return ids, mask


def right_padded(
    rows: Sequence[Sequence], pad: float, dtype: torch.dtype = torch.long
) -> tuple[torch.Tensor, torch.Tensor]:
    """Values [B, R] with each row at the left end, `pad` after it, and its mask (1 on the row)."""
    width = max(map(len, rows))
    values = torch.full((len(rows), width), pad, dtype=dtype)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        values[b, : len(row)] = torch.tensor(row, dtype=dtype)
        mask[b, : len(row)] = 1
    return values, mask


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Running count of real tokens − 1 along each row, 0 on left padding."""
    return (torch.cumsum(attention_mask, dim=-1) - 1).clamp(min=0)


def prompt_response_tensors(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> dict[str, torch.Tensor]:
    """prompts, responses, input_ids, attention_mask, position_ids and response_mask of the rows."""
    prompt_ids, prompt_mask = left_padded(prompts, pad_id)
    response_ids, response_mask = right_padded(responses, pad_id)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return {
        "prompts": prompt_ids,
        "responses": response_ids,
        "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids(attention_mask),
        "response_mask": response_mask,
    }
