"""Teacher scoring as episodes finish (verl_masopd/teacher/overlap.py): on the teacher server path
the finished episodes are scored while a slow one still generates, the step waits only for what is
left, the scores equal those of one pass after the rollout, and the batches' stats add up."""

import asyncio
import sys
from pathlib import Path

import pytest

from verl_masopd.serving.teacher_scorer import ServerTeacherScorer
from verl_masopd.teacher.attribution import Attributions
from verl_masopd.teacher.judging import JudgeStats
from verl_masopd.teacher.overlap import Scored, ScoringAsDone
from verl_masopd.teacher.scoring import ScoringStats
from verl_masopd.workflows.base import Attribution

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overlap_rollout import rollout_scored, scored_after  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_teacher_scoring import StandInTeacherServer  # noqa: E402

# three episodes end at turn 0, one at turn 2 with replies 10x slower
AGREE_AT = {"f0": 0, "f1": 0, "f2": 0, "slow": 2}
DELAY = {"f0": 0.01, "f1": 0.01, "f2": 0.01, "slow": 0.1}


class TimedServer(StandInTeacherServer):
    """The stand-in teacher server, answering after `delay_s`."""

    def __init__(self, delay_s: float):
        super().__init__()
        self.delay_s = delay_s

    async def generate(self, request_id, **kwargs):
        await asyncio.sleep(self.delay_s)
        return await super().generate(request_id, **kwargs)


def times(log, what):
    return [(key, t) for key, _, event, t in log if event == what]


async def test_finished_episodes_are_scored_while_the_slow_one_generates(tiny_tokenizer):
    results, log, report, waited = await rollout_scored(
        tiny_tokenizer, ServerTeacherScorer(TimedServer(0.02)), AGREE_AT, DELAY
    )
    slow_done = dict(times(log, "done"))["slow"]
    last_reply = max(t for uid, _, event, t in log if event == "reply")
    starts, ends = times(log, "score_start"), times(log, "score_end")
    # the fast episodes' batch started and ended before the slow episode's last reply
    (first_batch, first_start), (_, first_end) = starts[0], ends[0]
    assert "slow" not in first_batch and first_start < first_end < last_reply
    # the slow episode is scored on its own, in the last batch, after it was handed over
    assert starts[-1][0] == ("slow",) and starts[-1][1] >= slow_done
    assert sorted(u for batch, _ in starts for u in batch) == sorted(AGREE_AT)
    # the step waited only for the slow episode's batch: less than all the scoring took
    busy = sum(end - start for (_, start), (_, end) in zip(starts, ends, strict=True))
    assert waited < busy
    assert report.teacher.responses == sum(len(r.samples) for r in results) == 2 * (1 + 1 + 1 + 3)


async def test_overlapped_scores_equal_the_scores_after_the_rollout(tiny_tokenizer):
    results, _, report, _ = await rollout_scored(tiny_tokenizer, ServerTeacherScorer(TimedServer(0.0)), AGREE_AT, DELAY)
    after, stats = await scored_after(tiny_tokenizer, ServerTeacherScorer(StandInTeacherServer()), results)
    overlapped = [s.teacher for r in results for s in r.samples]
    assert None not in overlapped
    assert overlapped == [s.teacher for r in after for s in r.samples]
    for name in ("responses", "passes", "teacher_tokens", "shared_prefix_tokens", "computed_tokens", "truncations"):
        assert getattr(report.teacher, name) == getattr(stats, name), name


async def test_a_scoring_error_raises_at_the_drain():
    async def failing(batch):
        raise RuntimeError("teacher server down")

    scoring = ScoringAsDone(failing)

    class Result:
        episode_id = "e1"

    with pytest.raises(RuntimeError, match="teacher server down"):
        await scoring.drain([Result()])


def test_the_batches_stats_add_up():
    a = ScoringStats(2, 2, 100, 30, 80, 1, 5, {"t0": [0.25, 0.75]}, None)
    b = ScoringStats(1, 2, 40, 10, 40, 0, 0, {"t0": [0.5], "t1": [1.0]}, None)
    assert a.merge(b) == ScoringStats(3, 2, 140, 40, 120, 1, 5, {"t0": [0.25, 0.75, 0.5], "t1": [1.0]}, None)
    assert ScoringStats(references=1).merge(ScoringStats(references=2)).references == 3
    judged = JudgeStats(2, {"searcher": [0.5, 1.0]}, 1, 30).merge(JudgeStats(1, {"searcher": [0.0]}, 0, 12))
    assert judged == JudgeStats(3, {"searcher": [0.5, 1.0, 0.0]}, 1, 42)
    assert judged.metrics()["judge/searcher/score"] == pytest.approx(0.5)
    one = Attribution(turn=0, verdicts={"a": True}, decisions={"a": "hold"}, source="model")
    first = Attributions({("e1", 0): one}, model_calls=1, overrides=1)
    first.fallbacks["no reference"] += 1
    both = first.merge(Attributions({("e2", 0): one}, model_calls=2))
    assert set(both.by_turn) == {("e1", 0), ("e2", 0)}
    assert (both.model_calls, both.overrides, both.fallbacks["no reference"]) == (3, 1, 1)
    assert Scored(a).merge(Scored(None, None, judged)) == Scored(a, None, judged)
