"""The HF backend's continuous batching (rollout/hf_batching.py) on the shipped tiny math student:
finished rows leave the batch, and a row's tokens and log-probs are those it gets alone."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch

from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.tiny_world.weights import WEIGHTS

QUESTIONS = ["What is 2+3?", "Compute 17*3 and explain", "hi", "Solve x+1=4 for x please, step by step"]


@pytest.fixture(scope="module")
def backend():
    return HFBackend(str(WEIGHTS / "math" / "student"), seed=0)


def prompts(backend):
    return [backend.tokenizer.encode(q) for q in QUESTIONS]


async def together(backend, prompts, samplings):
    """Each prompt its own call, all queued at once (as the rollout without a turn barrier sends them)."""
    return [g for [g] in await asyncio.gather(*(backend.generate([p], s) for p, s in zip(prompts, samplings)))]


async def test_a_finished_row_leaves_the_batch_and_greedy_rows_match_single_generation(backend):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=30)
    samplings = [replace(greedy, seed=i) for i in range(len(QUESTIONS))]
    before = replace(backend.batcher.stats)
    batched = await together(backend, prompts(backend), samplings)
    stats = backend.batcher.stats
    lengths = [len(g.token_ids) for g in batched]
    assert len(set(lengths)) == len(lengths)  # rows finish at different steps
    assert stats.batches - before.batches == 1
    # a row is computed by the decoding steps after its first token until it finishes, no longer
    assert stats.steps - before.steps == max(lengths) - 1
    assert stats.row_steps - before.row_steps == sum(n - 1 for n in lengths) < len(lengths) * (max(lengths) - 1)
    for prompt, got in zip(prompts(backend), batched, strict=True):
        [alone] = backend.generate_sync([prompt], greedy)  # HF's generate, one sequence
        assert got.token_ids == alone.token_ids and got.finish_reason == alone.finish_reason
        assert got.log_probs == pytest.approx(alone.log_probs, abs=2e-5)


async def test_sampled_rows_do_not_depend_on_their_batch(backend):
    sampling = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=24)
    samplings = [replace(sampling, seed=100 + i) for i in range(len(QUESTIONS))]
    batched = await together(backend, prompts(backend), samplings)
    for prompt, s, got in zip(prompts(backend), samplings, batched, strict=True):
        [alone] = await backend.generate([prompt], s)
        assert got.token_ids == alone.token_ids and got.finish_reason == alone.finish_reason
        assert got.log_probs == pytest.approx(alone.log_probs, abs=1e-5)
    other_seeds = await together(backend, prompts(backend), [replace(s, seed=s.seed + 50) for s in samplings])
    assert [g.token_ids for g in other_seeds] != [g.token_ids for g in batched]


async def test_rows_of_one_batch_keep_their_own_budget_and_stop_strings(backend):
    base = SamplingParams(temperature=0.0, max_new_tokens=30)
    [free] = await backend.generate([prompts(backend)[1]], replace(base, seed=0))
    text = backend.tokenizer.decode(free.token_ids[:6], skip_special_tokens=True)
    stop = text[-2:]
    samplings = [replace(base, seed=0, max_new_tokens=3), replace(base, seed=1, stop=(stop,)), replace(base, seed=2)]
    short, stopped, full = await together(backend, [prompts(backend)[1]] * 3, samplings)
    assert (short.token_ids, short.finish_reason) == (free.token_ids[:3], "length")
    assert stopped.finish_reason == "stop" and stop in backend.tokenizer.decode(stopped.token_ids)
    assert stop not in backend.tokenizer.decode(stopped.token_ids[:-1]) and len(stopped.token_ids) <= 6
    assert full.token_ids == free.token_ids


async def test_a_request_joins_a_running_batch_and_matches_its_single_generation(backend):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=30)
    long_prompt, late_prompt = prompts(backend)[3], prompts(backend)[0]
    before = replace(backend.batcher.stats)
    running = asyncio.ensure_future(backend.generate([long_prompt], replace(greedy, seed=0)))
    while backend.batcher.stats.steps - before.steps < 1:  # the long row is decoding
        await asyncio.sleep(0.0005)
    [late] = await backend.generate([late_prompt], replace(greedy, seed=1))
    [long] = await running
    assert backend.batcher.stats.joined - before.joined == 1 and backend.batcher.stats.batches - before.batches == 1
    for prompt, got in ((long_prompt, long), (late_prompt, late)):
        [alone] = await backend.generate([prompt], replace(greedy, seed=2))
        assert got.token_ids == alone.token_ids
        assert got.log_probs == pytest.approx(alone.log_probs, abs=1e-5)


async def test_a_weight_update_waits_for_the_replies_in_flight_and_each_reply_records_its_version():
    """Version 1 (the final norm zeroed: all logits 0) replies token 0 until its budget; version 2
    (the shipped weights) replies in its own words. An update to version 2 sent while a version-1
    reply decodes lands after it: the reply is version 1's throughout, a request sent beside the
    update is one version's reply throughout, and each records the version that decoded it."""
    backend = HFBackend(str(WEIGHTS / "math" / "student"), seed=0)
    shipped = {k: v.clone() for k, v in backend.model.state_dict().items()}
    backend.update_weights({**shipped, "model.norm.weight": torch.zeros_like(shipped["model.norm.weight"])}, 1)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=200)
    long_prompt, late_prompt = prompts(backend)[3], prompts(backend)[0]
    [shipped_late] = HFBackend(str(WEIGHTS / "math" / "student")).generate_sync([late_prompt], greedy)
    replies = {1: lambda g: g.token_ids == [0] * 200, 2: lambda g: g.token_ids == shipped_late.token_ids}

    before = backend.batcher.stats.steps
    running = asyncio.ensure_future(backend.generate([long_prompt], replace(greedy, seed=0)))
    while backend.batcher.stats.steps - before < 2:  # the long reply is decoding
        await asyncio.sleep(0.0005)
    update = asyncio.ensure_future(asyncio.to_thread(backend.update_weights, shipped, 2))
    [late] = await backend.generate([late_prompt], replace(greedy, seed=1))
    await update
    [long] = await running
    [after] = await backend.generate([late_prompt], replace(greedy, seed=2))

    assert (long.token_ids, long.finish_reason, long.version) == ([0] * 200, "length", 1)
    assert replies[late.version](late)
    assert after.version == 2 and replies[2](after) and len(after.token_ids) < 200
