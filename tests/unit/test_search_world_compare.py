"""The search world's comparison summary (benchmarks/search_world_compare.py) from hand-written
evaluations: mean ± std over seeds of the macro metrics, and the reference minus another system
with seeds paired on the same questions."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import search_world_compare as compare  # noqa: E402

from verl_masopd.eval.qa_attempts import QaAttempt, write_attempts  # noqa: E402


def write(runs: Path, system: str, seed: int, correct: dict[str, list[bool]]) -> None:
    """One evaluation: per question id ("1hop:a", "2hop:b") its attempts' EM."""
    folder = runs / system / f"seed{seed}" / "eval" / "qa-heldout"
    folder.mkdir(parents=True)
    attempts = [
        QaAttempt(f"tiny_search_{q.split(':')[0]}", q, j, em, em, em, None, 10, 100)
        for q, ems in correct.items()
        for j, em in enumerate(ems)
    ]
    write_attempts(attempts, folder / "qa_attempts.jsonl")


def test_systems_over_seeds_and_the_paired_difference(tmp_path):
    t, f = True, False
    write(tmp_path, "multiagent-opd", 0, {"1hop:a": [t, t], "1hop:b": [t, f], "2hop:c": [t, t], "2hop:d": [f, f]})
    write(tmp_path, "multiagent-opd", 1, {"1hop:a": [t, t], "1hop:b": [t, t], "2hop:c": [t, f], "2hop:d": [f, f]})
    write(tmp_path, "hmas-base", 0, {"1hop:a": [t, f], "1hop:b": [f, f], "2hop:c": [f, f], "2hop:d": [f, f]})
    write(tmp_path, "hmas-base", 1, {"1hop:a": [f, f], "1hop:b": [f, f], "2hop:c": [t, f], "2hop:d": [f, f]})
    summary = compare.summarize(tmp_path, ["multiagent-opd", "hmas-base", "cmas-base"], [0, 1], resamples=200)

    assert list(summary["systems"]) == ["multiagent-opd", "hmas-base"]  # cmas-base was not evaluated
    opd = summary["systems"]["multiagent-opd"]
    # avg@2 per seed: macro of (3/4, 2/4) = 0.625 and (4/4, 1/4) = 0.625
    assert opd["avg_at_k"] == {"mean": pytest.approx(0.625), "std": pytest.approx(0.0)}
    # pass@2: (1, 1/2) and (1, 1/2) → 0.75; 2/2: (1/2, 1/2) and (1, 0) → 0.5
    assert opd["pass_at_k"]["mean"] == pytest.approx(0.75) and opd["all_k"]["mean"] == pytest.approx(0.5)
    base = summary["systems"]["hmas-base"]
    assert base["avg_at_k"]["mean"] == pytest.approx((0.125 + 0.125) / 2)
    d = summary["differences"]["hmas-base"]
    assert d["seeds"] == [0, 1]
    assert d["avg_at_k"]["difference"] == pytest.approx(0.625 - 0.125)
    assert d["avg_at_k"]["low"] <= d["avg_at_k"]["difference"] <= d["avg_at_k"]["high"]
    table = compare.summary_markdown(summary, 2)
    assert "| multiagent-opd | 2 | 62.5 ± 0.0 | 75.0 ± 0.0 | 50.0 ± 0.0 |" in table
    assert "| hmas-base | +50.0 [" in table
    # paired by seed alone: avg@2 of hmas-base is macro(1/4, 0) = macro(0, 1/4) = 0.125 at both seeds
    t = d["paired_by_seed"]["avg_at_k"]
    assert t["mean"] == pytest.approx(0.5) and t["se"] == pytest.approx(0.0) and t["seeds"] == [0, 1]
    assert "| hmas-base | +50.0 ± 0.0 [+50.0, +50.0] |" in table


def test_pooled_questions_are_paired_by_seed():
    a = QaAttempt("tiny_search_1hop", "x", 0, True, True, True, None, 1, 1)
    pooled = compare.pooled({0: [a], 2: [a]})
    assert [p.question for p in pooled] == ["seed0:x", "seed2:x"]


def test_student_and_teacher_replace_the_shipped_models_in_every_run(tmp_path):
    student, teacher = tmp_path / "student", tmp_path / "teacher"
    student.mkdir(), teacher.mkdir()
    args = compare.build_parser().parse_args(
        ["--cache", str(tmp_path / "world"), "--student", str(student), "--teacher", str(teacher)]
    )
    settings = compare.settings_of(args, tmp_path / "runs")

    assert settings["exports"]["STUDENT_MODEL"] == str(student)
    assert settings["exports"]["TEACHER_MODEL"] == str(teacher)
    # the recipes read the models from the runs' environment, the prompt-only evaluations from the exports
    assert settings["env"]["STUDENT_MODEL"] == str(student) and settings["env"]["TEACHER_MODEL"] == str(teacher)
    assert Path(settings["exports"]["RETRIEVER"]).is_dir()

    args.student = str(tmp_path / "missing")
    with pytest.raises(SystemExit, match="--student: .*missing is not a folder"):
        compare.settings_of(args, tmp_path / "runs")
