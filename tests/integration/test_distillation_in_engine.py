"""The engine's distillation modes on verl's real engine (one rank, CPU): the loss verl reports
equals the divergence computed here by hand from the models' own logits, an update moves the
student towards the teacher, and a stale row's tokens weigh what the rollout correction says
(trainer/distillation_loss.py, trainer/staleness.py)."""

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from verl import DataProto

from verl_masopd.algos.distillation import DistillationSettings
from verl_masopd.config import compose_config
from verl_masopd.config.actor_loss import actor_loss
from verl_masopd.config.validate import verl_algo_config
from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.trainer.distillation_loss import DistillationActorLoss
from verl_masopd.trainer.staleness import Staleness

pytestmark = pytest.mark.integration

PROMPT_LENGTHS, RESPONSE_LENGTHS = [6, 4, 5], [3, 5, 4]
K = 4
# per-row weights w (a teacher estimator's row, a reward estimator's row at λ = 0.5, an unscored row)
ROW_WEIGHTS = [1.0, 0.5, 0.0]


def response_log_softmax(model, batch: DataProto) -> torch.Tensor:
    """log softmax of a transformers forward (`model` or its path) at the positions that predict
    the response, [B, R, V]."""
    if isinstance(model, str):
        model = AutoModelForCausalLM.from_pretrained(model, attn_implementation="sdpa")
    t = batch.batch
    with torch.no_grad():
        logits = model(
            input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]
        ).logits.float()
    return torch.log_softmax(logits[:, t["prompts"].shape[1] - 1 : -1], dim=-1)


@pytest.fixture(scope="module")
def batch(make_policy_batch, tiny_model_path, tiny_teacher_path):
    """A batch with the teacher's top K and sampled-token log-probs, and the weights w_k."""
    data = make_policy_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=5)
    teacher = response_log_softmax(tiny_teacher_path, data)
    mask = data.batch["response_mask"].float()
    top = teacher.topk(K, dim=-1)
    data.batch["teacher_topk_ids"] = top.indices * mask[..., None].long()
    data.batch["teacher_topk_log_probs"] = top.values * mask[..., None]
    data.batch["teacher_log_probs"] = teacher.gather(-1, data.batch["responses"][..., None])[..., 0] * mask
    data.batch["distillation_weight"] = torch.tensor(ROW_WEIGHTS)[:, None] * mask
    data.batch["advantages"] = torch.zeros_like(mask)
    return data


def loss_fn(tiny_model_path, **settings) -> DistillationActorLoss:
    base = actor_loss(compose_config(["preset=cpu", f"students.path={tiny_model_path}"]))
    return DistillationActorLoss(base.config, DistillationSettings(**settings))


def expected_loss(batch: DataProto, student: torch.Tensor, mode: str, beta: float = 0.5) -> float:
    """Σ_k w_k D_k / N, N the batch's response tokens (verl's token-mean), D by the formulas."""
    t = batch.batch
    mask, w = t["response_mask"].float(), t["distillation_weight"]
    if mode == "k3":
        x = t["teacher_log_probs"] - student.gather(-1, t["responses"][..., None])[..., 0]
        d = (x.exp() - x - 1) * mask
    else:
        log_p = t["teacher_topk_log_probs"].clamp_min(-10.0)
        log_q = student.gather(-1, t["teacher_topk_ids"]).clamp_min(-10.0)
        if mode == "forward_kl_topk":
            d = (log_p.exp() * (log_p - log_q)).sum(-1)
        else:
            log_m = torch.log(beta * log_p.exp() + (1 - beta) * log_q.exp())
            d = beta * (log_p.exp() * (log_p - log_m)).sum(-1) + (1 - beta) * (log_q.exp() * (log_q - log_m)).sum(-1)
        d = d.clamp_min(0.0)
    return float((w * d).sum() / mask.sum())


@pytest.mark.parametrize(
    "settings",
    [
        {"loss_mode": "forward_kl_topk", "topk": K, "use_policy_gradient": False, "log_prob_min_clamp": -10.0},
        {"loss_mode": "jsd", "topk": K, "use_policy_gradient": False, "log_prob_min_clamp": -10.0, "jsd_beta": 0.3},
        {"loss_mode": "k3", "use_policy_gradient": False},
    ],
)
def test_the_engine_loss_is_the_divergence_by_hand(settings, batch, tiny_model_path, tiny_teacher_path):
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_model_path, lr=1e-4, seed=0))
    student = response_log_softmax(tiny_model_path, batch)
    batch.batch["old_log_probs"] = engine.infer_batch(batch)
    loss = loss_fn(tiny_model_path, **settings)
    before = expected_loss(batch, student, settings["loss_mode"], settings.get("jsd_beta", 0.5))
    assert before > 1e-4

    metrics = engine.train_mini_batch(batch, loss)

    assert metrics["distillation/loss"][0] == pytest.approx(before, rel=1e-4)
    # zero advantages: the PPO term adds nothing, so the loss is the distillation term alone
    assert metrics["loss"][0] == pytest.approx(before, rel=1e-4)
    exported = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    exported.load_state_dict(engine.hf_state_dict())
    after = expected_loss(
        batch, response_log_softmax(exported, batch), settings["loss_mode"], settings.get("jsd_beta", 0.5)
    )
    assert after < before


def test_engine_tensors_put_response_row_i_at_sequence_row_p_minus_1_plus_i(batch, tiny_model_path):
    loss = loss_fn(tiny_model_path, loss_mode="forward_kl_topk", topk=K, use_policy_gradient=False)
    tensors = loss.engine_tensors(batch)
    width, length = batch.batch["prompts"].shape[1], batch.batch["responses"].shape[1]
    assert tensors["teacher_ids"].shape == (3, width + length, K)
    for i in range(length):
        assert torch.equal(tensors["teacher_ids"][:, width - 1 + i], batch.batch["teacher_topk_ids"][:, i])
        assert torch.equal(tensors["teacher_logprobs"][:, width - 1 + i], batch.batch["teacher_topk_log_probs"][:, i])
    assert tensors["teacher_logprobs"][:, : width - 1].abs().sum() == 0
    assert tensors["teacher_logprobs"][:, -1].abs().sum() == 0
    k3 = loss_fn(tiny_model_path, loss_mode="k3", use_policy_gradient=False).engine_tensors(batch)
    assert k3["teacher_ids"].shape == (3, width + length, 1)
    assert torch.equal(k3["teacher_ids"][:, width - 1 : -1, 0], batch.batch["responses"])
    assert math.isclose(
        float(k3["teacher_logprobs"].sum()), float(batch.batch["teacher_log_probs"].sum()), rel_tol=1e-6
    )


def test_policy_gradient_form_with_an_advantage_adds_both_terms(batch, tiny_model_path):
    """use_policy_gradient: verl's clipped loss with advantage −D_k; at ratio 1 its value is Σ w D / N
    again, and the estimator's advantage A (e.g. masopd's β · clip(Δ)) adds −Σ A / N."""
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_model_path, lr=1e-4, seed=0))
    data = DataProto(batch=batch.batch.clone())
    mask = data.batch["response_mask"].float()
    data.batch["advantages"] = torch.tensor([[0.3], [-0.2], [0.1]]) * mask
    data.batch["old_log_probs"] = engine.infer_batch(data)
    settings = {"loss_mode": "forward_kl_topk", "topk": K, "use_policy_gradient": True, "log_prob_min_clamp": -10.0}
    distill = expected_loss(data, response_log_softmax(tiny_model_path, data), "forward_kl_topk")
    policy = float(-(data.batch["advantages"] * mask).sum() / mask.sum())

    metrics = engine.train_mini_batch(data, loss_fn(tiny_model_path, **settings))

    assert metrics["distillation/loss"][0] == pytest.approx(distill, rel=1e-4)
    assert metrics["loss"][0] == pytest.approx(policy + distill, rel=1e-4)


@pytest.mark.parametrize(
    "settings",
    [
        {"loss_mode": "k3", "use_policy_gradient": False},
        {"loss_mode": "forward_kl_topk", "topk": K, "use_policy_gradient": False, "log_prob_min_clamp": -10.0},
    ],
)
def test_a_stale_row_weighs_what_the_rollout_correction_says(settings, batch, tiny_model_path):
    """Row 0 is one version stale with log r = 0.4, −3.0, 1.2 on its 3 tokens: the correction rejects
    the second (r < 0.2) and weighs the others min(r, 2). The engine's distillation term leaves the
    rejected token out, and its sampled-token supervised form (k3) carries the weights; a top-k
    term, an expectation over the vocabulary, carries none."""
    cfg = compose_config(["preset=cpu", f"students.path={tiny_model_path}"])
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_model_path, lr=1e-4, seed=0))
    data = DataProto(batch=batch.batch.clone())
    old = engine.infer_batch(data)
    data.batch["old_log_probs"] = old
    log_r = torch.zeros_like(old)
    log_r[0, :3] = torch.tensor([0.4, -3.0, 1.2])
    data.batch["rollout_log_probs"] = old - log_r
    data.non_tensor_batch["policy"] = np.array(["p"] * 3, dtype=object)
    data.non_tensor_batch["policy_version"] = np.array([0, 1, 1], dtype=object)

    Staleness(1, verl_algo_config(cfg).rollout_correction).apply(data, {"p": 1})

    mask = data.batch["response_mask"].float()
    assert mask[0, :3].tolist() == [1.0, 0.0, 1.0]
    rho = torch.ones_like(mask)
    rho[0, :3] = torch.tensor([math.exp(0.4), 1.0, 2.0])
    hand = DataProto(batch=data.batch.clone())
    sampled = settings["loss_mode"] == "k3"
    hand.batch["distillation_weight"] = data.batch["distillation_weight"] * mask * (rho if sampled else 1.0)
    expected = expected_loss(hand, response_log_softmax(tiny_model_path, data), settings["loss_mode"])
    assert expected > 1e-4

    metrics = engine.train_mini_batch(data, loss_fn(tiny_model_path, **settings))

    assert metrics["distillation/loss"][0] == pytest.approx(expected, rel=1e-4)
