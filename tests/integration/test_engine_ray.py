"""verl's real engine as Ray worker groups on CPU: a student and a forward-only teacher sharing one pool."""

import pytest
import torch

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine, policy_loss

pytestmark = pytest.mark.integration


def test_student_and_teacher_worker_groups_share_a_cpu_pool(
    hf_log_probs, ray_local, tiny_model_path, tiny_teacher_path, make_policy_batch
):
    from verl.single_controller.ray import RayResourcePool

    pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=2)
    student = PolicyEngine.on_ray(EngineSettings(model_path=tiny_model_path, lr=1e-2), pool, name_prefix="student")
    teacher = PolicyEngine.on_ray(
        EngineSettings(model_path=tiny_teacher_path, forward_only=True), pool, name_prefix="teacher"
    )
    batch = make_policy_batch([5, 3, 4, 5], [4, 2, 4, 3], seed=4)

    student_log_probs = student.infer_batch(batch)
    torch.testing.assert_close(student_log_probs, hf_log_probs(tiny_model_path, batch), atol=1e-4, rtol=0)
    torch.testing.assert_close(teacher.infer_batch(batch), hf_log_probs(tiny_teacher_path, batch), atol=1e-4, rtol=0)

    before = student.hf_state_dict()
    metrics = student.train_mini_batch(batch, policy_loss("vanilla"))  # old_log_probs <- rollout_log_probs
    after = student.hf_state_dict()

    assert metrics["grad_norm"][0] > 0
    assert not torch.equal(before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"])
    assert not torch.allclose(student.infer_batch(batch), student_log_probs, atol=1e-4)
