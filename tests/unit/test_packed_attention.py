"""The packed attention equals one forward per sequence, and shared-prefix teacher scoring equals the
full recomputation, on a tiny Qwen3 model."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.platform.packed_attention import PACKED_SDPA, sequence_bounds
from verl_masopd.teacher.prefix_scoring import (
    packed_batches,
    prefix_groups,
    score_with_shared_prefix,
    shared_prefix_length,
    tree_row,
)
from verl_masopd.teacher.scoring import ScoreRequest


def sequences(vocab: int, lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=generator) for n in lengths]


def test_sequence_bounds_split_where_positions_restart():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    assert sequence_bounds(positions) == [0, 3, 5, 9]
    assert sequence_bounds(torch.arange(4)[None]) == [0, 4]


def test_packed_row_equals_separate_forwards_and_gradients(tiny_model_path):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation=PACKED_SDPA)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    seqs = sequences(model.config.vocab_size, [7, 1, 12])
    packed = torch.cat(seqs)[None]
    positions = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    logits = model(input_ids=packed, position_ids=positions).logits[0]
    separate = torch.cat([reference(input_ids=s[None]).logits[0] for s in seqs])
    torch.testing.assert_close(logits, separate, atol=1e-5, rtol=0)
    # transformers' sdpa over the packed row (a block-diagonal mask of the whole row) agrees: only the cost differs
    plain = reference(input_ids=packed, position_ids=positions, use_cache=False).logits[0]
    torch.testing.assert_close(plain, separate, atol=1e-5, rtol=0)
    logits.logsumexp(-1).sum().backward()
    separate.logsumexp(-1).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def full_scores(model, request: ScoreRequest) -> list[float]:
    seq = torch.tensor([request.context_ids + request.response_ids])
    with torch.no_grad():
        rows = torch.log_softmax(model(input_ids=seq).logits[0].float(), dim=-1)
    start = len(request.context_ids) - 1
    return [rows[start + i, y].item() for i, y in enumerate(request.response_ids)]


def test_shared_prefix_scores_equal_full_recomputation(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation=PACKED_SDPA)
    s, c1, c2, c3, y1, y2 = sequences(model.config.vocab_size, [40, 6, 9, 5, 8, 3], seed=1)
    shared = s.tolist()
    requests = [
        ScoreRequest(shared + c1.tolist(), y1.tolist()),  # own role of y1
        ScoreRequest(shared + c2.tolist(), y1.tolist()),  # contrast role of y1
        ScoreRequest(shared[:30] + c3.tolist(), y2.tolist()),  # y2 alone: no shared prefix
        ScoreRequest(shared + c1.tolist() + c2.tolist(), y1.tolist()),  # longer context, same response
    ]
    assert prefix_groups(requests) == [[0, 1, 3], [2]]
    assert shared_prefix_length([r.context_ids for r in requests[:2]]) == 40
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # the last context token is always recomputed
    scores, computed = score_with_shared_prefix(model, requests)
    for request, got in zip(requests, scores, strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(full_scores(model, request)), atol=1e-4, rtol=0)
    assert computed == 40 + (6 + 8) + (9 + 8) + (6 + 9 + 8) + (35 + 3)


def test_tree_rows_batch_groups_of_different_lengths_and_groups_that_share_nothing(tiny_model_path):
    """Several tree rows per packed forward (and one row per forward under a small token budget)
    return the full recomputation's log-probs; a group whose contexts share no token is scored too."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation=PACKED_SDPA)
    s, t, c1, c2, c3, c4, y1, y2, y3 = sequences(model.config.vocab_size, [25, 11, 4, 7, 3, 5, 6, 9, 2], seed=2)
    s, t, c1, c2, c3, c4 = (x.tolist() for x in (s, t, c1, c2, c3, c4))
    y1, y2, y3 = (y.tolist() for y in (y1, y2, y3))
    requests = [
        ScoreRequest(s + c1, y1),
        ScoreRequest(t + c2, y2),
        ScoreRequest(s + c2, y1),
        ScoreRequest(t + c3, y2),
        ScoreRequest(c4 + s, y3),  # y3's contexts begin differently: no shared prefix
        ScoreRequest(c1 + t, y3),
    ]
    assert [shared_prefix_length([requests[i].context_ids for i in g]) for g in prefix_groups(requests)] == [25, 11, 0]
    expected = [full_scores(model, r) for r in requests]
    tokens = (25 + 4 + 6 + 7 + 6) + (11 + 7 + 9 + 3 + 9) + (5 + 25 + 2 + 4 + 11 + 2)
    for budget in (4096, 1):
        scores, computed = score_with_shared_prefix(model, requests, max_batch_tokens=budget)
        assert computed == tokens
        for want, got in zip(expected, scores, strict=True):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)
    rows = [tree_row(requests, g) for g in prefix_groups(requests)]
    assert [len(row.tokens) for row in rows] == [48, 39, 49]
    assert packed_batches(rows, 4096) == [[0, 1, 2]]
    assert packed_batches(rows, 100) == [[0, 1], [2]]
    assert packed_batches(rows, 1) == [[0], [1], [2]]


def test_shared_prefix_scoring_refuses_an_attention_without_branches(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    with pytest.raises(ValueError, match="needs the 'sdpa_packed' attention .* the teacher runs 'sdpa'"):
        score_with_shared_prefix(model, [ScoreRequest([5, 6, 7], [8])])


def test_a_segment_starting_past_zero_is_a_branch_of_the_last_root(tiny_model_path):
    """s ⊕ b1 ⊕ b2, positions 0..|s|+|b1|−1 then |s|..: b2 sees s and itself, not b1; a branch
    starting beyond its root's length is refused."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation=PACKED_SDPA)
    s, b1, b2, other = sequences(model.config.vocab_size, [9, 5, 7, 4], seed=3)
    row = torch.cat([s, b1, b2, other])[None]
    positions = torch.cat([torch.arange(14), torch.arange(9, 16), torch.arange(4)])[None]
    with torch.no_grad():
        logits = model(input_ids=row, position_ids=positions).logits[0]
        alone = [model(input_ids=torch.cat(parts)[None]).logits[0] for parts in ((s, b1), (s, b2), (other,))]
    torch.testing.assert_close(logits[:14], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[14:21], alone[1][9:], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[21:], alone[2], atol=1e-5, rtol=0)
    with torch.no_grad(), pytest.raises(ValueError, match="a branch at position 10 follows a root of 4 tokens"):
        rootless = torch.cat([torch.arange(4), torch.arange(10, 15)])[None]
        model(input_ids=torch.cat([other, b1])[None], position_ids=rootless)
