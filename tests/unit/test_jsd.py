"""The generalised JSD over the teacher's top k (algos/jsd.py) against numbers computed by hand."""

import math

import pytest
import torch
from verl.trainer.distillation.losses import DISTILLATION_SETTINGS_REGISTRY

from verl_masopd.algos.jsd import generalised_jsd, jsd_topk


def by_hand(p: list[float], q: list[float], beta: float) -> float:
    m = [beta * a + (1 - beta) * b for a, b in zip(p, q)]
    return beta * sum(a * math.log(a / c) for a, c in zip(p, m)) + (1 - beta) * sum(
        b * math.log(b / c) for b, c in zip(q, m)
    )


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_generalised_jsd_by_hand(beta):
    p, q = [0.5, 0.25, 0.125], [0.25, 0.5, 0.0625]
    got = generalised_jsd(torch.tensor(p).log(), torch.tensor(q).log(), beta)
    # float32 against float64 by hand: the terms' logs cancel partly, so the last digits differ by CPU
    assert got.item() == pytest.approx(by_hand(p, q, beta), rel=1e-5)


def test_symmetric_at_one_half_zero_at_equality_and_small_beta_approaches_scaled_forward_kl():
    p, q = torch.tensor([0.7, 0.2, 0.1]).log(), torch.tensor([0.3, 0.3, 0.4]).log()
    assert generalised_jsd(p, q, 0.5).item() == pytest.approx(generalised_jsd(q, p, 0.5).item(), rel=1e-6)
    assert generalised_jsd(p, p, 0.3).item() == pytest.approx(0.0, abs=1e-7)
    # β → 0: D ≈ β · KL(p‖q) (float32: a few digits)
    kl = (p.exp() * (p - q)).sum().item()
    assert generalised_jsd(p, q, 1e-3).item() / 1e-3 == pytest.approx(kl, rel=1e-2)


def test_jsd_topk_reads_the_packed_layout_of_verls_logits_pass():
    # two sequences of 2 and 1 positions, vocabulary 4, k = 2
    logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 0.0], [1.0, 2.0, 1.0, 0.0]]])
    teacher_ids = torch.nested.as_nested_tensor(
        [torch.tensor([[0, 1], [2, 3]]), torch.tensor([[1, 0]])], layout=torch.jagged
    )
    log_p = torch.nested.as_nested_tensor(
        [torch.tensor([[0.6, 0.3], [0.5, 0.4]]).log(), torch.tensor([[0.8, 0.1]]).log()], layout=torch.jagged
    )
    out = jsd_topk(logits, log_p, teacher_ids, beta=0.5, log_prob_min_clamp=None)
    q = torch.softmax(logits[0], dim=-1)
    rows = [([0.6, 0.3], [q[0, 0], q[0, 1]]), ([0.5, 0.4], [q[1, 2], q[1, 3]]), ([0.8, 0.1], [q[2, 1], q[2, 0]])]
    expected = [by_hand(p, [float(x) for x in qs], 0.5) for p, qs in rows]
    assert out["distillation_losses"].shape == (1, 3)
    assert out["distillation_losses"][0].tolist() == pytest.approx(expected, rel=1e-4)
    assert out["teacher_mass"][0].tolist() == pytest.approx([0.9, 0.9, 0.9], rel=1e-6)
    assert out["student_mass"][0].tolist() == pytest.approx([float(sum(qs)) for _, qs in rows], rel=1e-6)


def test_jsd_is_a_top_k_mode_of_verls_registry():
    assert DISTILLATION_SETTINGS_REGISTRY["jsd"].use_topk
