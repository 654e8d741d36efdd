"""The search demo's before/after table (report/search_demo.py) on hand-written attempts."""

import math

from verl_masopd.eval.qa_attempts import QaAttempt, write_attempts
from verl_masopd.report.search_demo import evaluation, main, rise


def attempt(dataset, i, em, failure=None, relaxed=None):
    relaxed = em if relaxed is None else relaxed
    return QaAttempt(dataset, f"q{i}", 0, em, em or relaxed, relaxed, failure, 10 * (i + 1), 100)


def test_before_and_after_with_hand_numbers(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir(), after.mkdir()
    write_attempts(
        [attempt("tiny_search_1hop", 0, True), attempt("tiny_search_1hop", 1, False, "untagged", True),
         attempt("tiny_search_2hop", 2, False, "no_candidate"), attempt("tiny_search_2hop", 3, False)],
        before / "qa_attempts.jsonl",
    )  # fmt: skip
    write_attempts([attempt("tiny_search_1hop", i, i != 3) for i in range(4)], after / "qa_attempts.jsonl")
    b = evaluation(before)
    assert b["em"] == {"n": 4, "p": 0.25, "se": math.sqrt(0.25 * 0.75 / 4)}
    assert b["em_by_dataset"] == {"tiny_search_1hop": 0.5, "tiny_search_2hop": 0.0}
    assert (b["relaxed_em"], b["no_candidate"], b["untagged"]) == (0.5, 0.25, 0.25)
    assert (b["tokens_generated"], b["tokens_read"]) == (25.0, 100.0)
    delta, se = rise(b, evaluation(after))
    assert delta == 0.5 and se == math.sqrt(2 * 0.25 * 0.75 / 4)
    assert main([str(before), str(after), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "| before | 0.250 ± 0.217 | 0.500 | 0.000 | 0.500 | 0.250 | 0.250 | 25 | 100 |" in printed
    assert "rise of held-out exact match: +0.500 ± 0.306 (1.6 se)" in printed
    assert (tmp_path / "out" / "report.json").is_file()


def test_a_missing_evaluation_is_named(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
