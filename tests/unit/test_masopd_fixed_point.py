"""What the masopd update converges to (docs/method.md, "What the masopd update converges to").

One position with a fixed context and a vocabulary of six tokens: the student is a softmax
π_θ = softmax(θ), the teacher's distributions under the own role condition, π_T(· | x_r), and
under the contrasting ones, π_T(· | x_q), are fixed. Each step builds the batch that enumerates
the vocabulary (row y: the one-token response y with ℓS = log π_θ(y), ℓT(r) = log π_T(y | x_r),
ℓT(q) = log π_T(y | x_q)), takes A(y) from the project's estimator (`compute_advantages`), and
moves θ along the exact expected policy gradient

    θ ← θ + η · Σ_y π_θ(y) · A(y) · ∇_θ log π_θ(y)

(on-policy: π_θold = π_θ, so verl's ratio is 1 and its clip does not act). The limit is

    π* ∝ π_T(· | x_r) · exp(β · clip(Δ, −c, c)),   Δ = log π_T(· | x_r) − mean_q log π_T(· | x_q)

that is π_T(· | x_r) for β = 0, π_T(· | x_r)^(1+β) / π_T(· | x_q)^β where no clip binds, and
with κ = 2 the geometric mean of the two contrasting distributions in the denominator.
"""

import pytest
import torch
from verl import DataProto

from verl_masopd.algos import compute_advantages, read_estimator

OWN = torch.log_softmax(torch.tensor([1.2, 0.4, 0.0, -0.6, 0.8, -1.0], dtype=torch.float64), 0)
CONTRAST = torch.log_softmax(torch.tensor([-0.4, 1.0, 0.1, -0.8, 1.1, 0.3], dtype=torch.float64), 0)
SECOND_CONTRAST = torch.log_softmax(torch.tensor([0.5, -0.5, 0.9, 0.0, -0.3, 0.6], dtype=torch.float64), 0)
VOCAB = len(OWN)
STEP, STEPS = 2.0, 3000


def advantages(theta: torch.Tensor, contrast: torch.Tensor, ras_coef: float, ras_clip: float) -> torch.Tensor:
    """A(y) for every token y of the vocabulary, from the estimator on the enumerating batch."""
    log_pi = torch.log_softmax(theta, 0).float()
    batch = DataProto.from_dict(
        tensors={
            "response_mask": torch.ones(VOCAB, 1),
            "old_log_probs": log_pi.unsqueeze(1),
            "teacher_log_probs": OWN.float().unsqueeze(1),
            "teacher_contrast_log_probs": contrast.T.float().unsqueeze(2),  # [B = V, κ, R = 1]
        }
    )
    algorithm = {
        "adv_estimator": "masopd",
        "masopd": {"ras_coef": ras_coef, "ras_clip": ras_clip, "num_contrast_roles": contrast.shape[0]},
    }
    return compute_advantages(batch, read_estimator(algorithm)).batch["advantages"][:, 0].double()


def converge(contrast: torch.Tensor, ras_coef: float, ras_clip: float) -> torch.Tensor:
    """π_θ after STEPS exact expected policy-gradient steps from the uniform policy."""
    theta = torch.zeros(VOCAB, dtype=torch.float64)
    for _ in range(STEPS):
        a = advantages(theta, contrast, ras_coef, ras_clip)
        theta = theta.detach().requires_grad_(True)
        log_pi = torch.log_softmax(theta, 0)
        (gradient,) = torch.autograd.grad((log_pi.exp().detach() * a * log_pi).sum(), theta)
        theta = theta.detach() + STEP * gradient
    return torch.softmax(theta, 0)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def target(log_weights: torch.Tensor) -> torch.Tensor:
    return torch.softmax(log_weights, 0)


DELTA = OWN - CONTRAST
TARGETS = {
    "opd": target(OWN),  # β = 0: the teacher under the own role
    "sharpened": target(2 * OWN - CONTRAST),  # β = 1, c = 5: π_T(r)² / π_T(q)
    "clipped": target(OWN + DELTA.clamp(-0.5, 0.5)),  # β = 1, c = 0.5
    "two_contrasts": target(2 * OWN - (CONTRAST + SECOND_CONTRAST) / 2),  # β = 1, κ = 2
}
CASES = {
    "opd": (CONTRAST[None], 0.0, 5.0),
    "sharpened": (CONTRAST[None], 1.0, 5.0),
    "clipped": (CONTRAST[None], 1.0, 0.5),
    "two_contrasts": (torch.stack([CONTRAST, SECOND_CONTRAST]), 1.0, 5.0),
}


def test_the_cases_exercise_what_they_name():
    # c = 5 binds nowhere; c = 0.5 binds on some tokens (Δ ≈ 1.64, −0.56, −1.26) and not on others
    assert DELTA.abs().max() < 5 and DELTA.abs().max() > 1
    clipped = DELTA.abs() > 0.5
    assert 0 < int(clipped.sum()) < VOCAB
    two = OWN - (CONTRAST + SECOND_CONTRAST) / 2
    assert two.abs().max() < 5


def test_the_targets_differ_measurably():
    names = sorted(TARGETS)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert total_variation(TARGETS[a], TARGETS[b]) > 0.05, (a, b)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_update_converges_to_its_target(case):
    contrast, ras_coef, ras_clip = CASES[case]
    policy = converge(contrast, ras_coef, ras_clip)
    distances = {name: total_variation(policy, t) for name, t in TARGETS.items()}
    assert distances[case] < 1e-3, distances
    assert all(d > 0.04 for name, d in distances.items() if name != case), distances
    # at the limit the advantage is the same for every token (log Z): no direction left to move
    a = advantages(torch.log(policy), contrast, ras_coef, ras_clip)
    assert float(a.max() - a.min()) < 1e-2
