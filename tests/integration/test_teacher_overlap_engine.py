"""Teacher scoring as episodes finish on verl's engine (forward-only, CPU): the engine scores the
finished episodes in a thread while a slow episode still generates, and its scores equal those of
one pass over all episodes after the rollout (within 1e-5)."""

import sys
from pathlib import Path

import pytest

from verl_masopd.engine.policy_engine import EngineSettings, PolicyEngine
from verl_masopd.teacher.engine_scorer import EngineTeacherScorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overlap_rollout import rollout_scored, scored_after  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("share", [False, True])
async def test_engine_scores_finished_episodes_while_the_slow_one_generates(share, tiny_teacher_path, tiny_tokenizer):
    engine = PolicyEngine.local(EngineSettings(model_path=tiny_teacher_path, forward_only=True))
    scorer = EngineTeacherScorer(engine, pad_id=tiny_tokenizer.pad_token_id, share_prefix=share)
    agree_at, delay = {"f0": 0, "f1": 0, "slow": 2}, {"f0": 0.01, "f1": 0.01, "slow": 1.0}
    results, log, report, _ = await rollout_scored(tiny_tokenizer, scorer, agree_at, delay)

    last_reply = max(t for _, _, event, t in log if event == "reply")
    batches = [(key, t) for key, _, event, t in log if event in ("score_start", "score_end")]
    # the fast episodes' batch ran through the engine before the slow episode's last reply
    (first, start), (_, end) = batches[:2]
    assert "slow" not in first and start < end < last_reply
    after, stats = await scored_after(tiny_tokenizer, scorer, results)
    for r, a in zip(results, after, strict=True):
        for s, t in zip(r.samples, a.samples, strict=True):
            assert s.teacher.log_probs == pytest.approx(t.teacher.log_probs, abs=1e-5)
            assert s.teacher.contrast[0] == pytest.approx(t.teacher.contrast[0], abs=1e-5)
    assert report.teacher.responses == stats.responses == 2 * (1 + 1 + 3)
    # a prefix is shared within a batch only: the batches of the overlap compute at least as many tokens
    if share:
        assert report.teacher.computed_tokens >= stats.computed_tokens
    else:
        assert report.teacher.computed_tokens == stats.computed_tokens == stats.teacher_tokens
