"""HFBackend on the tiny Qwen3 model: log-probs of the processed distribution, eos handling,
length limits, left-padding invariance, weight updates."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.tokens.chat import encode_messages

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def backend(tiny_model_path):
    return HFBackend(tiny_model_path, seed=0)


def prompts(tokenizer):
    return [
        encode_messages(tokenizer, [{"role": "user", "content": text}])
        for text in ("hi", "what is the sum of the first 10 integers?")
    ]


def forward_log_probs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


async def test_log_probs_are_those_of_the_tempered_distribution(backend):
    ps = prompts(backend.tokenizer)
    gens = await backend.generate(ps, SamplingParams(temperature=0.7, max_new_tokens=12))
    for p, g in zip(ps, gens, strict=True):
        assert len(g.token_ids) == len(g.log_probs) > 0
        expected = forward_log_probs(backend.model, p, g.token_ids, 0.7)
        assert torch.allclose(torch.tensor(g.log_probs), expected, atol=1e-4)


async def test_top_k_filtered_log_probs_renormalise_over_kept_tokens(backend):
    [p] = prompts(backend.tokenizer)[:1]
    [g] = await backend.generate([p], SamplingParams(temperature=1.0, top_k=5, max_new_tokens=6))
    ids = torch.tensor([p + g.token_ids])
    with torch.no_grad():
        logits = backend.model(ids).logits[0, len(p) - 1 : -1].float()
    top = logits.topk(5, dim=-1)
    for k, token in enumerate(g.token_ids):
        kept = dict(zip(top.indices[k].tolist(), top.values[k].log_softmax(-1).tolist(), strict=True))
        assert token in kept and g.log_probs[k] == pytest.approx(kept[token], abs=1e-4)


async def test_max_new_tokens_and_eos(backend):
    ps = prompts(backend.tokenizer)
    gens = await backend.generate(ps * 8, SamplingParams(max_new_tokens=5))
    for g in gens:
        assert len(g.token_ids) <= 5
        eos_at = [i for i, t in enumerate(g.token_ids) if t in backend.eos_ids]
        if g.finish_reason == "stop":
            assert eos_at == [len(g.token_ids) - 1]
        else:
            assert g.finish_reason == "length" and eos_at == [] and len(g.token_ids) == 5


async def test_eos_ends_the_response_and_is_kept_with_its_log_prob(tiny_model_path):
    eos_backend = HFBackend(tiny_model_path)
    greedy = SamplingParams(temperature=0, max_new_tokens=5)
    [p] = prompts(eos_backend.tokenizer)[:1]
    [free] = await eos_backend.generate([p], greedy)
    eos_backend.eos_ids = [free.token_ids[-1]]  # declare the last greedy token an eos
    end = free.token_ids.index(free.token_ids[-1]) + 1
    [g] = await eos_backend.generate([p], greedy)
    assert g.token_ids == free.token_ids[:end] and g.finish_reason == "stop"
    assert g.log_probs == pytest.approx(free.log_probs[:end], abs=1e-5)


async def test_left_padding_does_not_change_greedy_outputs(backend):
    ps = prompts(backend.tokenizer)
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    together = await backend.generate(ps, greedy)
    alone = [(await backend.generate([p], greedy))[0] for p in ps]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    for a, b in zip(together, alone, strict=True):
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-4)


async def test_update_weights_switches_the_model(tiny_model_path, tiny_teacher_path):
    student = HFBackend(tiny_model_path)
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    ps = prompts(student.tokenizer)
    before = [g.token_ids for g in await student.generate(ps, greedy)]
    other = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    torch.manual_seed(123)
    for param in other.parameters():
        param.data.normal_(0, 0.5)
    student.update_weights(other.state_dict(), version=7)
    after = [g.token_ids for g in await student.generate(ps, greedy)]
    reference = HFBackend(tiny_model_path)
    reference.model.load_state_dict(other.state_dict())
    assert after == [g.token_ids for g in await reference.generate(ps, greedy)]
    assert after != before and student.version == 7
