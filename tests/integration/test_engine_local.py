"""verl's real engine (TrainingWorker + FSDP2, gloo, one rank) in this process, on the CPU platform."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine, policy_loss

pytestmark = pytest.mark.integration

PROMPT_LENGTHS, RESPONSE_LENGTHS = [6, 4, 5, 6], [3, 5, 4, 5]


@pytest.fixture(scope="module")
def student(tiny_model_path):
    return PolicyEngine.local(EngineSettings(model_path=tiny_model_path, lr=1e-2, seed=0))


def test_infer_batch_equals_transformers_forward(hf_log_probs, student, tiny_model_path, make_policy_batch):
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=1)
    log_probs = student.infer_batch(batch)
    assert log_probs.shape == (4, 5)
    assert log_probs[0, 3:].abs().sum() == 0 and log_probs[2, 4] == 0
    assert (log_probs[batch.batch["response_mask"].bool()] < 0).all()
    torch.testing.assert_close(log_probs, hf_log_probs(tiny_model_path, batch), atol=1e-4, rtol=0)


def test_entropy_comes_with_the_same_log_probs(hf_log_probs, student, tiny_model_path, make_policy_batch):
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=4)
    log_probs, entropy = student.log_probs_and_entropy(batch)
    assert torch.equal(log_probs, student.infer_batch(batch))
    # H_t = −Σ_v p log p of a plain transformers forward at the response positions, 0 on padding
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    tensors = batch.batch
    with torch.no_grad():
        logits = model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        ).logits.float()
    log_p = torch.log_softmax(logits[:, tensors["prompts"].shape[1] - 1 : -1], dim=-1)
    expected = -(log_p.exp() * log_p).sum(-1) * tensors["response_mask"]
    torch.testing.assert_close(entropy, expected, atol=1e-4, rtol=0)
    assert (entropy[tensors["response_mask"].bool()] > 0).all()


def test_forward_only_engine_scores_like_transformers(hf_log_probs, tiny_teacher_path, make_policy_batch):
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=2)
    torch.testing.assert_close(teacher.infer_batch(batch), hf_log_probs(tiny_teacher_path, batch), atol=1e-4, rtol=0)
    with pytest.raises(RuntimeError, match="forward-only"):
        teacher.train_mini_batch(batch, policy_loss())


def test_a_bfloat16_teacher_holds_bfloat16_weights_and_scores_as_the_float32_copy_would(
    tiny_teacher_path, make_policy_batch
):
    """A forward-only engine in bfloat16 loads its weights in bfloat16 (no master copy to keep);
    a trainable engine in bfloat16 keeps float32 weights and casts them for each forward: the
    same bfloat16 weights, so the same log-probs up to the last bit of a bfloat16 log-prob
    (8 bits of mantissa: a relative 2^-7 at most, one step of 2^-5 at −6)."""
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=4)
    teacher = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True, dtype="bfloat16"))
    trainable = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, dtype="bfloat16"))
    assert {t.dtype for t in teacher.hf_state_dict().values()} == {torch.bfloat16}
    assert {t.dtype for t in trainable.hf_state_dict().values()} == {torch.float32}
    torch.testing.assert_close(teacher.infer_batch(batch), trainable.infer_batch(batch), atol=2**-7, rtol=2**-7)


def test_train_mini_batch_updates_weights_and_export(
    hf_log_probs, student, tiny_model_path, make_policy_batch, tmp_path
):
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=3)
    before = student.hf_state_dict()
    assert set(before) >= {"model.embed_tokens.weight", "model.norm.weight"}
    batch.batch["old_log_probs"] = student.infer_batch(batch)

    metrics = student.train_mini_batch(batch, policy_loss("vanilla"), mini_batch_size=2)

    assert len(metrics["loss"]) == 2 and len(metrics["grad_norm"]) == 2
    assert all(g > 0 for g in metrics["grad_norm"])
    # On-policy first step: the PPO ratio is 1, so nothing is clipped.
    assert metrics["actor/pg_clipfrac"][0] == 0.0
    after = student.hf_state_dict()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed and len(changed) > len(before) // 2

    exported = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    exported.load_state_dict(after)
    torch.testing.assert_close(student.infer_batch(batch), hf_log_probs(exported, batch), atol=1e-4, rtol=0)

    student.save_checkpoint(tmp_path / "ckpt", step=1)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "huggingface")
    for name, tensor in saved.state_dict().items():  # verl writes the huggingface/ copy in bfloat16
        torch.testing.assert_close(tensor, after[name].to(tensor.dtype), atol=0, rtol=0)

    student.train_mini_batch(batch, policy_loss("vanilla"))
    assert not torch.equal(student.hf_state_dict()["model.norm.weight"], after["model.norm.weight"])
    student.load_checkpoint(tmp_path / "ckpt")
    restored = student.hf_state_dict()
    assert all(torch.equal(restored[name], after[name]) for name in after)


def test_missing_model_path_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        EngineSettings(model_path=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        EngineSettings(model_path=str(tmp_path))


def test_actor_config_settings_reach_the_loss_in_the_engine(student, make_policy_batch, tiny_model_path):
    """entropy_coeff and clip_ratio_high of `actor_rollout_ref.actor` reach verl's loss in the engine:
    the entropy term is computed and the pg clip bound follows clip_ratio_high."""
    from verl_masopd.config import compose_config
    from verl_masopd.config.actor_loss import actor_loss

    overrides = ["preset=cpu", f"students.path={tiny_model_path}", "algorithm.adv_estimator=grpo"]
    plain = actor_loss(compose_config(overrides))
    tuned = actor_loss(
        compose_config(
            overrides + ["actor_rollout_ref.actor.entropy_coeff=0.01", "actor_rollout_ref.actor.clip_ratio_high=10.0"]
        )
    )
    batch = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=4)
    # old log-probs below the current ones: the ratio e ≈ 2.7 exceeds 1 + 0.2 but not 1 + 10
    batch.batch["old_log_probs"] = student.infer_batch(batch) - batch.batch["response_mask"]
    batch.batch["advantages"] = torch.ones_like(batch.batch["old_log_probs"])

    plain_metrics = student.train_mini_batch(batch, plain)
    tuned_metrics = student.train_mini_batch(batch, tuned)

    assert "actor/entropy_loss" not in plain_metrics and tuned_metrics["actor/entropy_loss"][0] > 0
    assert plain_metrics["actor/pg_clipfrac"][0] == 1.0
    assert tuned_metrics["actor/pg_clipfrac"][0] < 1.0
