"""masopd / opd token advantages against hand-computed numbers (docs/method.md, "MAS-OPD")."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator
from verl_masopd.algos.masopd import compute_masopd_advantage, compute_opd_advantage

TEACHER = torch.tensor([[-1.0, -2.0, -0.5]])
STUDENT = torch.tensor([[-1.5, -1.0, -3.0]])
CONTRAST = torch.tensor([[[-3.0, -1.5, 0.0]]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def algorithm(**masopd):
    return OmegaConf.create({"adv_estimator": "masopd", "masopd": masopd})


def masopd(config, teacher=TEACHER, contrast=CONTRAST, student=STUDENT, mask=MASK):
    advantages, returns = compute_masopd_advantage(
        None, mask, config, teacher_log_probs=teacher, teacher_contrast_log_probs=contrast, rollout_log_probs=student
    )
    assert torch.equal(advantages, returns)
    return advantages


def test_combined_advantage_defaults():
    # the trainer config's β = 0.25, c = 5: s = [0.5, -1], Δ = [2, -0.5] → A = [0.5 + 0.5, -1 - 0.125]; padding 0
    assert torch.allclose(masopd(algorithm()), torch.tensor([[1.0, -1.125, 0.0]]))


def test_combined_advantage_at_beta_one():
    # s = [0.5, -1], Δ = [2, -0.5], β = 1, c = 5 → A = [2.5, -1.5]
    assert torch.allclose(masopd(algorithm(ras_coef=1.0)), torch.tensor([[2.5, -1.5, 0.0]]))


def test_combined_advantage_with_coefficient_and_clip():
    # β = 0.5, c = 1: clip(Δ) = [1, -0.5] → A = [0.5 + 0.5, -1 - 0.25]
    assert torch.allclose(masopd(algorithm(ras_coef=0.5, ras_clip=1.0)), torch.tensor([[1.0, -1.25, 0.0]]))


def test_clipping_bounds_the_role_term_both_ways():
    teacher = torch.tensor([[0.0, -20.0]])
    contrast = torch.tensor([[[-10.0, 0.0]]])
    student = torch.tensor([[0.0, -20.0]])
    # s = 0; Δ = [10, -20] → clip to [5, -5], β = 1
    advantages = masopd(algorithm(ras_coef=1.0), teacher, contrast, student, torch.ones(1, 2))
    assert torch.allclose(advantages, torch.tensor([[5.0, -5.0]]))


def test_student_term_cancels_in_role_advantage():
    # Changing ℓS shifts A by exactly −ΔℓS: the RAS term does not depend on the student.
    other_student = STUDENT + torch.tensor([[0.7, -1.3, 4.0]])
    a1 = masopd(algorithm(ras_coef=1.0))
    a2 = masopd(algorithm(ras_coef=1.0), student=other_student)
    assert torch.allclose(a1 - a2, torch.tensor([[0.7, -1.3, 0.0]]))
    # Δ = s(r) − s(q) with the same student
    s_r = TEACHER - STUDENT
    s_q = CONTRAST[:, 0] - STUDENT
    ras = a1 - s_r * MASK
    assert torch.allclose(ras, (s_r - s_q) * MASK)


def test_kappa_averaging():
    teacher = torch.tensor([[-1.0, -2.0]])
    contrast = torch.tensor([[[-3.0, -1.0], [-1.0, -2.0]]])  # mean [-2, -1.5] → Δ = [1, -0.5]
    student = torch.tensor([[-1.0, -2.0]])  # s = 0
    advantages = masopd(algorithm(ras_coef=1.0, num_contrast_roles=2), teacher, contrast, student, torch.ones(1, 2))
    assert torch.allclose(advantages, torch.tensor([[1.0, -0.5]]))


def test_kappa_mismatch_names_the_key():
    with pytest.raises(ValueError, match="algorithm.masopd.num_contrast_roles"):
        masopd(algorithm(num_contrast_roles=2))


def test_masks_zero_padding_whatever_the_teacher_says():
    teacher = torch.tensor([[-1.0, 50.0, -80.0]])
    contrast = torch.tensor([[[-1.0, -90.0, 30.0]]])
    student = torch.tensor([[-1.0, 0.0, 0.0]])
    advantages = masopd(algorithm(), teacher, contrast, student, torch.tensor([[1.0, 0.0, 0.0]]))
    assert torch.equal(advantages, torch.zeros(1, 3))


def test_ras_off_equals_opd():
    a_masopd = masopd(algorithm(ras_coef=0.0))
    a_opd, _ = compute_opd_advantage(None, MASK, None, teacher_log_probs=TEACHER, rollout_log_probs=STUDENT)
    assert torch.allclose(a_opd, torch.tensor([[0.5, -1.0, 0.0]]))
    assert torch.equal(a_masopd, a_opd)


def test_old_log_probs_take_precedence_over_rollout_log_probs():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    advantages, _ = compute_opd_advantage(
        None, MASK, None, teacher_log_probs=TEACHER, old_log_probs=old, rollout_log_probs=STUDENT
    )
    assert torch.allclose(advantages, torch.tensor([[0.0, -1.0, 0.0]]))


def test_compute_advantages_on_a_batch():
    batch = DataProto.from_dict(
        tensors={
            "response_mask": MASK,
            "rollout_log_probs": STUDENT,
            "teacher_log_probs": TEACHER,
            "teacher_contrast_log_probs": CONTRAST,
        },
        non_tensors={"uid": np.array(["p"], dtype=object)},
    )
    out = compute_advantages(batch, read_estimator({"adv_estimator": "masopd"}))
    # no masopd section: the trainer config's β = 0.25, c = 5 (as test_combined_advantage_defaults)
    assert torch.allclose(out.batch["advantages"], torch.tensor([[1.0, -1.125, 0.0]]))
    assert out.meta_info["advantage_metrics"]["masopd/advantage_mean"] == pytest.approx(-0.0625)


def test_missing_teacher_field_names_it():
    batch = DataProto.from_dict(tensors={"response_mask": MASK, "rollout_log_probs": STUDENT})
    with pytest.raises(ValueError, match="teacher_log_probs"):
        compute_advantages(batch, read_estimator({"adv_estimator": "opd"}))
