"""Two training steps of every estimator through the real trainer: verl's engine on CPU, the real
workflows and sandbox, the teacher where the estimator needs one. Each step must produce finite
losses and change every policy's parameters."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration

CASES = [
    ("masopd", "math", ()),
    ("opd", "code", ()),
    ("grpo", "math", ()),
    ("magrpo", "math", ()),
    ("marft", "math", ()),
    ("cure", "code", ("workflow.policy_sharing=shared", "workflow.horizon=1")),
    ("at_grpo", "code", ("rollout.tree_sampling=true",)),
    # GRPO + OPD: the teacher's k3 term on GRPO's advantage (distillation.distillation_loss)
    (
        "grpo",
        "math",
        ("distillation.distillation_loss.use_task_rewards=true", "distillation.distillation_loss.loss_mode=k3"),
    ),
]
TASK_DISTILLATION = "distillation.distillation_loss.use_task_rewards=true"


@pytest.mark.parametrize(
    ("estimator", "domain", "extra"), CASES, ids=[c[0] + ("+opd" if TASK_DISTILLATION in c[2] else "") for c in CASES]
)
def test_two_steps_train_every_policy(estimator, domain, extra, trainer_overrides, scripted_backends, tiny_model_path):
    cfg = compose_config(
        trainer_overrides(domain, f"algorithm.adv_estimator={estimator}", "trainer.save_freq=-1", *extra)
    )
    trainer = Trainer(validate_config(cfg), backend_factory=scripted_backends(domain))
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()

    losses = []
    for _ in range(2):
        metrics = trainer.train_step()
        step_losses = {k: v for k, v in metrics.items() if k.endswith("/actor/pg_loss")}
        assert set(step_losses) == {f"{name}/actor/pg_loss" for name in trainer.policies}
        losses.extend(step_losses.values())
        for role in trainer.workflow.roles:
            assert metrics[f"actor/{role}/entropy"] > 0
            if estimator in ("masopd", "opd"):
                assert math.isfinite(metrics[f"{estimator}/{role}/opd_term"])
            if TASK_DISTILLATION in extra:
                assert math.isfinite(metrics[f"{estimator}/{role}/distillation_term"])
                assert metrics[f"{estimator}/{role}/distillation_term"] <= 0  # −k3 ≤ 0
    trainer.close()

    assert all(math.isfinite(v) for v in losses), losses
    for name, policy in trainer.policies.items():
        weights = policy.engine.hf_state_dict()
        moved = [k for k in initial if not torch.equal(weights[k], initial[k])]
        assert moved, f"{estimator}: policy {name} did not change"
        served = policy.backend.inner.model.state_dict()
        assert all(torch.equal(served[k], weights[k]) for k in moved), f"{name}: backend not synced"


def test_masopd_with_four_agents_and_model_attribution(trainer_overrides, scripted_backends):
    """Two agents per role share their role's policy; the attribution model is asked once per
    conflict turn and its unparsable verdicts fall back to the rules, counted."""
    cfg = compose_config(
        trainer_overrides(
            "math",
            "algorithm.adv_estimator=masopd",
            "trainer.save_freq=-1",
            "workflow.agents_per_role=2",
            "pac.attribution=model",
        )
    )
    trainer = Trainer(validate_config(cfg), backend_factory=scripted_backends("math"))
    metrics = trainer.train_step()
    trainer.close()

    assert sorted(trainer.policies) == ["reasoner", "tool_user"]
    assert metrics["rollout/episodes"] == 2
    # every turn but an episode's last ended in a conflict: one model call each, for all four agents
    conflicts = metrics["rollout/episodes"] * (metrics["rollout/mean_turns"] - 1)
    assert metrics["teacher/attribution_model_calls"] == conflicts >= 1
    # the untrained tiny teacher writes no parsable verdicts: every call falls back to the rules
    assert metrics["teacher/attribution_fallbacks"] == conflicts
    assert all(math.isfinite(metrics[f"{name}/actor/pg_loss"]) for name in trainer.policies)


def test_masopd_shared_prefix_scoring_gives_the_same_step_for_fewer_tokens(trainer_overrides, scripted_backends):
    """teacher.share_prefix under role_last: the teacher's metrics of a step equal the packed pass's
    (same seeds), from fewer tokens run through the teacher."""
    steps = {}
    for share in (False, True):
        cfg = compose_config(
            trainer_overrides(
                "math",
                "algorithm.adv_estimator=masopd",
                "trainer.save_freq=-1",
                "workflow.context_layout=role_last",
                f"teacher.share_prefix={str(share).lower()}",
            )
        )
        trainer = Trainer(validate_config(cfg), backend_factory=scripted_backends("math"))
        steps[share] = trainer.train_step()
        trainer.close()
    packed, shared = steps[False], steps[True]
    assert shared["teacher/tokens_per_response"] == packed["teacher/tokens_per_response"]
    assert packed["teacher/computed_tokens_per_response"] == packed["teacher/tokens_per_response"]
    assert shared["teacher/computed_tokens_per_response"] < packed["teacher/computed_tokens_per_response"]
    for key in ("teacher/reasoner/reverse_kl", "teacher/reasoner/role_advantage", "teacher/tool_user/role_advantage"):
        assert shared[key] == pytest.approx(packed[key], abs=1e-4), key
