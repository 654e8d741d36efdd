"""Self-distillation through the real trainer on CPU (teacher.source frozen or live, with the
problem's reference in the teacher's contexts), with full fine-tuning and with LoRA: each policy's
teacher is the policy itself; after one update the live teacher's log-probs on a fixed sequence are
the policy's current ones and no longer step 0's, and the frozen teacher's stay step 0's."""

import asyncio

import pytest
import torch

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.engine.policy_engine import PolicyEngine
from verl_masopd.teacher.engine_scorer import AdapterOff, scoring_batch
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration

POLICIES = ("reasoner", "tool_user")
LORA = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8")


def build(source: str, lora: bool, student: str, data: str, root) -> Trainer:
    cfg = compose_config(
        [
            "preset=cpu",
            "engines.placement=local",
            f"students.path={student}",
            f"teacher.source={source}",
            "teacher.privileged=reference",
            f"data.train_files=[{data}]",
            "workflow.domain=math",
            "data.train_batch_size=1",
            "data.max_response_length=24",
            "rollout.group_size=2",
            "workflow.horizon=2",
            "trainer.total_training_steps=1",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={root}",
            "actor_rollout_ref.actor.optim.lr=1e-2",  # a step that moves the log-probs visibly
            *(LORA if lora else ()),
        ]
    )
    return Trainer(validate_config(cfg))


def scores(trainer: Trainer, policy: str, requests) -> torch.Tensor:
    """The policy's teacher's log-probs of `requests` (padded [B, R])."""
    (index,) = [i for i, t in enumerate(trainer.teachers.entries) if t.key == policy]
    rows = asyncio.run(trainer.teacher.scorers[index].score(requests))
    return _padded(rows)


def current(trainer: Trainer, policy: str, requests) -> torch.Tensor:
    """The policy's own log-probs of `requests` now (its engine, adapter on)."""
    log_probs = trainer.policies[policy].engine.infer_batch(scoring_batch(requests, trainer.pad_id))
    return _padded([log_probs[b, : len(r.response_ids)].tolist() for b, r in enumerate(requests)])


def _padded(rows) -> torch.Tensor:
    out = torch.zeros(len(rows), max(len(r) for r in rows))
    for b, row in enumerate(rows):
        out[b, : len(row)] = torch.tensor(row)
    return out


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("source", ["live", "frozen"])
def test_the_teacher_is_the_policy_now_or_at_step_0(source, lora, tiny_model_path, builtin_data, tmp_path):
    trainer = build(source, lora, tiny_model_path, builtin_data["math"], tmp_path / "checkpoints")
    try:
        tokenizer = trainer.tokenizer
        context = tokenizer.encode("What is 6 times 7? Answer after ####.", add_special_tokens=False)
        requests = [
            ScoreRequest(context, tokenizer.encode("6 * 7 = 42\n#### 42", add_special_tokens=False)),
            ScoreRequest(context[:5], tokenizer.encode("#### 41", add_special_tokens=False)),
        ]
        # one teacher per policy, routed by the policy; no teacher model of its own where none is needed
        assert [t.key for t in trainer.teachers.entries] == list(POLICIES)
        engines = {p: trainer.teacher.scorers[i].engine for i, p in enumerate(POLICIES)}
        for policy in POLICIES:
            engine = engines[policy]
            if source == "live":
                assert engine is trainer.policies[policy].engine
            elif lora:
                assert isinstance(engine, AdapterOff) and engine.engine is trainer.policies[policy].engine
            else:
                assert isinstance(engine, PolicyEngine) and engine.settings.forward_only
                assert engine.settings.model_path == tiny_model_path
        if source == "frozen" and not lora:
            assert engines["reasoner"] is engines["tool_user"]  # one copy of the shared starting folder

        before = {p: scores(trainer, p, requests) for p in POLICIES}
        for p in POLICIES:  # at step 0 every source is the initial policy
            assert torch.allclose(before[p], current(trainer, p, requests), atol=1e-5)

        metrics = trainer.train_step()
        assert metrics["teacher/reference_share"] == 1.0  # every math row carries its reference answer

        for p in POLICIES:
            after, now = scores(trainer, p, requests), current(trainer, p, requests)
            assert (now - before[p]).abs().max() > 1e-3, f"{p}: the update moved the policy"
            if source == "live":
                assert torch.allclose(after, now, atol=1e-5), f"{p}: the live teacher is the policy now"
            else:
                assert torch.allclose(after, before[p], atol=1e-6), f"{p}: the frozen teacher is step 0's"
    finally:
        trainer.close()
