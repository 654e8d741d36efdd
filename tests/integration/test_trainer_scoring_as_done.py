"""A masopd step without the turn barrier through the real trainer: the teacher scores the episodes
as they finish (teacher/overlap.py), and the step's teacher metrics equal those of the same step
scored after the rollout (the sampling is seeded per request, so both steps play the same episodes)."""

import pytest

from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.trainer.loop import Trainer

pytestmark = pytest.mark.integration


def one_step(cfg, backends, after: bool) -> dict[str, float]:
    trainer = Trainer(validate_config(cfg), backend_factory=backends)
    if after:
        trainer.scores_as_done = False  # the lockstep trainer's scoring, on the same rollout
    try:
        return trainer.train_step()
    finally:
        trainer.close()


def test_masopd_scores_as_episodes_finish(trainer_overrides, scripted_backends):
    cfg = compose_config(
        trainer_overrides(
            "math", "algorithm.adv_estimator=masopd", "rollout.turn_barrier=false", "trainer.save_freq=-1"
        )
    )
    overlapped = one_step(cfg, scripted_backends("math"), after=False)
    after = one_step(cfg, scripted_backends("math"), after=True)

    assert "timing_s/scoring_left" in overlapped and "timing_s/teacher" not in overlapped
    assert overlapped["timing_s/scoring_busy"] > 0
    assert "timing_s/teacher" in after and "timing_s/scoring_left" not in after
    # every teacher metric but the tokens computed (a prefix is shared within a scoring batch only)
    teacher = sorted(k for k in after if k.startswith("teacher/") and k != "teacher/computed_tokens_per_response")
    assert any(k.endswith("/reverse_kl") for k in teacher)
    for key in teacher:
        assert overlapped[key] == pytest.approx(after[key], abs=1e-4), key
