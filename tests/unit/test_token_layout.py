"""The token layout shared by the training batch, the teacher's scoring batch, the HF backend and
the critic: prompts left-padded, responses right-padded, positions counting real tokens."""

import torch

from verl_masopd.tokens.layout import left_padded, position_ids, prompt_response_tensors, right_padded


def test_rows_of_different_lengths():
    t = prompt_response_tensors([[5, 6, 7], [8]], [[1], [2, 3]], pad_id=0)
    assert t["prompts"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert t["responses"].tolist() == [[1, 0], [2, 3]]
    assert t["input_ids"].tolist() == [[5, 6, 7, 1, 0], [0, 0, 8, 2, 3]]
    assert t["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert t["position_ids"].tolist() == [[0, 1, 2, 3, 3], [0, 0, 0, 1, 2]]
    assert t["response_mask"].tolist() == [[1, 0], [1, 1]]


def test_padding_helpers_keep_values_and_dtype():
    ids, mask = left_padded([[4], [4, 5, 6]], pad_id=9)
    assert ids.tolist() == [[9, 9, 4], [4, 5, 6]] and mask.tolist() == [[0, 0, 1], [1, 1, 1]]
    values, mask = right_padded([[-0.5, -1.5], []], 0.0, torch.float32)
    assert values.dtype == torch.float32 and values.tolist() == [[-0.5, -1.5], [0.0, 0.0]]
    assert mask.tolist() == [[1, 1], [0, 0]]
    assert position_ids(torch.tensor([[0, 1, 1, 0]])).tolist() == [[0, 0, 1, 1]]
