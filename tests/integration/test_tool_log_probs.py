"""A response with several tool calls inside, sampled by the HF backend on the tiny model: the
sampling log-probs of its generated tokens and the engine's recomputed log-probs of the flattened
batch (observations in the sequence, masked) agree within 1e-4; the teacher's scores sit on the
generated tokens only."""

import asyncio
import sys
from pathlib import Path

import pytest
import torch

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.rollout.backend import SamplingParams
from verl_masopd.rollout.batch import to_dataproto
from verl_masopd.rollout.hf_backend import HFBackend
from verl_masopd.rollout.manager import RolloutManager
from verl_masopd.rollout.records import episodes_of
from verl_masopd.teacher.contexts import TeacherContextBuilder
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer
from verl_masopd.teacher.scoring import TeacherScoring
from verl_masopd.workflows.problem import Problem

sys.path.insert(0, str(Path(__file__).parent))
from echo_tool import EchoingReasoner  # noqa: E402

pytestmark = pytest.mark.integration


def test_sampling_and_engine_log_probs_agree_on_a_response_with_calls(tiny_model_path, tiny_teacher_path):
    workflow = EchoingReasoner(horizon=1)
    backend = HFBackend(tiny_model_path, seed=3)
    problems = [
        Problem(uid=f"m{i}", domain="math", statement=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)
    ]
    sampling = SamplingParams(max_new_tokens=40)
    with RolloutManager(workflow, {"reasoner": backend}, backend.tokenizer, sampling=sampling) as manager:
        groups = asyncio.run(manager.run(problems, group_size=2))
    samples = [s for r in episodes_of(groups) for s in r.samples]
    assert max(len(s.tool_calls) for s in samples) >= 2 and manager.metrics.tool_calls >= 6
    assert all(len(s.response_ids) <= 40 for s in samples)
    observed = sum(len(s.generated) - sum(s.generated) for s in samples)
    # every token the policy did not sample: the observations, and pieces re-encoded at a stop string
    assert observed == manager.metrics.observation_tokens + manager.metrics.stop_cut_tokens
    assert manager.metrics.observation_tokens > 0

    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    builder = TeacherContextBuilder(workflow, backend.tokenizer, 4096)
    asyncio.run(
        TeacherScoring(builder, EngineTeacherScorer(teacher, 0), 0, pac_enable=False).score(episodes_of(groups))
    )

    batch = to_dataproto(groups, None, 512, 40, backend.tokenizer.pad_token_id)
    mask = batch.batch["response_mask"].bool()
    attended = batch.batch["attention_mask"][:, -mask.shape[1] :].bool()
    assert (attended & ~mask).sum() == observed  # observations: attended, never trained on
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_model_path, seed=0))
    recomputed = engine.infer_batch(batch)
    gap = (recomputed - batch.batch["rollout_log_probs"])[mask].abs().max()
    assert gap <= 1e-4
    assert (batch.batch["teacher_log_probs"][~mask] == 0).all() and (batch.batch["teacher_log_probs"][mask] < 0).all()
    assert torch.equal(recomputed[~mask], torch.zeros_like(recomputed[~mask]))
