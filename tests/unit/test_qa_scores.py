"""QA evaluation statistics of a search system: every metric of hand-made attempts (k = 4)
computed by hand, the JSON-lines reader, the paired bootstrap and the Markdown tables."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from verl_masopd.eval.qa_attempts import QaAttempt, by_question, parse_attempts, read_attempts
from verl_masopd.report.qa_bootstrap import Interval, paired_differences
from verl_masopd.report.qa_markdown import qa_markdown
from verl_masopd.report.qa_scores import METRICS, system_scores
from verl_masopd.report.qa_tables import MACRO, qa_tables

ROOT = Path(__file__).resolve().parents[2]
NO_FAILURE = (None, None, None, None)


def question(dataset, qid, em, sub=None, relaxed=None, failures=NO_FAILURE, generated=100, read=1000):
    """The 4 attempts of one question; em, sub, relaxed as 4 digits ("1001": attempts 0 and 3
    correct), sub-EM and relaxed EM equal to EM unless given; tokens per attempt, one number or 4."""
    sub, relaxed = sub or em, relaxed or em
    generated = generated if isinstance(generated, tuple) else (generated,) * 4
    read = read if isinstance(read, tuple) else (read,) * 4
    return [
        QaAttempt(dataset, qid, j, em[j] == "1", sub[j] == "1", relaxed[j] == "1", failures[j], generated[j], read[j])
        for j in range(4)
    ]


def system_a():
    """nq: 3 questions, hotpotqa: 2 questions."""
    return [
        # nq q1: all correct
        *question("nq", "q1", "1111", generated=100, read=1000),
        # nq q2: attempt 0 correct; attempt 2 untagged but relaxed EM reads it (rescued); attempt 3 no candidate
        *question(
            "nq",
            "q2",
            "1000",
            sub="1100",
            relaxed="1010",
            failures=(None, None, "untagged", "no_candidate"),
            generated=(200, 200, 300, 300),
            read=2000,
        ),
        # nq q3: never correct; an empty tag, an untagged answer relaxed EM does not read either
        *question("nq", "q3", "0000", failures=("empty_candidate", "untagged", None, None), generated=100, read=3000),
        # hotpotqa h1: attempts 1 and 3 correct; attempt 2 untagged and rescued
        *question(
            "hotpotqa", "h1", "0101", sub="1101", relaxed="0111", failures=(None, None, "untagged", None), read=4000
        ),
        # hotpotqa h2: never correct, two attempts without a candidate
        *question(
            "hotpotqa",
            "h2",
            "0000",
            sub="0001",
            failures=("no_candidate", "no_candidate", None, None),
            generated=(100, 100, 100, 900),
            read=2000,
        ),
    ]


def system_b():
    """The same questions as system_a, other answers."""
    return [
        *question("nq", "q1", "1100"),
        *question("nq", "q2", "0000"),
        *question("nq", "q3", "0001"),
        *question("hotpotqa", "h1", "0000"),
        *question("hotpotqa", "h2", "1111"),
    ]


def test_every_metric_by_hand():
    scores = system_scores(system_a())
    nq, hotpot = scores.datasets["nq"], scores.datasets["hotpotqa"]
    assert scores.k == 4 and list(scores.datasets) == ["nq", "hotpotqa"]
    # nq, 3 questions × 4 attempts = 12 attempts
    expected_nq = {
        "avg_at_k": 5 / 12,  # EM 1s: q1 4 + q2 1 + q3 0 = 5 of 12
        "pass_at_k": 2 / 3,  # q1, q2 have a correct attempt
        "all_k": 1 / 3,  # q1 only
        "sub_em": 6 / 12,  # 4 + 2 + 0
        "relaxed_em": 6 / 12,  # 4 + 2 + 0
        "failure_rate": 4 / 12,  # q2: untagged, no_candidate; q3: empty_candidate, untagged
        "no_candidate": 1,
        "empty_candidate": 1,
        "untagged": 2,
        "rescued": 1,  # q2 attempt 2 (q3's untagged attempt has relaxed EM 0)
        "tokens_generated": 150,  # (400 + 1000 + 400) / 12
        "tokens_read": 2000,  # (4000 + 8000 + 12000) / 12
    }
    # hotpotqa, 2 questions × 4 attempts = 8 attempts
    expected_hotpot = {
        "avg_at_k": 2 / 8,  # h1 2 + h2 0
        "pass_at_k": 1 / 2,  # h1
        "all_k": 0.0,
        "sub_em": 4 / 8,  # h1 3 + h2 1
        "relaxed_em": 3 / 8,  # h1 3 + h2 0
        "failure_rate": 3 / 8,  # h1: untagged; h2: 2 × no_candidate
        "no_candidate": 2,
        "empty_candidate": 0,
        "untagged": 1,
        "rescued": 1,  # h1 attempt 2
        "tokens_generated": 200,  # (4 × 100 + 100 + 100 + 100 + 900) / 8
        "tokens_read": 3000,  # (16000 + 8000) / 8
    }
    # macro: the mean of the two datasets with equal weight (not the mean over all 20 attempts:
    # avg@4 over attempts would be 7/20 = 0.35)
    expected_macro = {
        "avg_at_k": 1 / 3,  # (5/12 + 3/12) / 2
        "pass_at_k": 7 / 12,  # (2/3 + 1/2) / 2
        "all_k": 1 / 6,  # (1/3 + 0) / 2
        "sub_em": 1 / 2,
        "relaxed_em": 7 / 16,  # (1/2 + 3/8) / 2
        "failure_rate": 17 / 48,  # (8/24 + 9/24) / 2
        "no_candidate": 1.5,
        "empty_candidate": 0.5,
        "untagged": 1.5,
        "rescued": 1.0,
        "tokens_generated": 175,  # (150 + 200) / 2
        "tokens_read": 2500,
    }
    for got, expected in ((nq, expected_nq), (hotpot, expected_hotpot), (scores.macro, expected_macro)):
        assert list(got) == list(METRICS)
        assert got == pytest.approx(expected, abs=1e-12)


def test_attempt_order_in_the_records_does_not_matter():
    attempts = system_a()
    shuffled = list(attempts)
    random.Random(3).shuffle(shuffled)
    assert system_scores(shuffled).datasets["nq"] == system_scores(attempts).datasets["nq"]
    assert by_question(shuffled)["nq"]["q2"] == tuple(a for a in attempts if a.question == "q2")


def test_grouping_refuses_a_repeated_attempt_and_unequal_k():
    attempts = question("nq", "q1", "1111")
    with pytest.raises(ValueError, match="dataset 'nq', question 'q1': attempt 3 twice"):
        by_question([*attempts, attempts[3]])
    with pytest.raises(ValueError, match="'q2' has 3 attempts.*'q1' has 4"):
        system_scores([*attempts, *question("nq", "q2", "1111")[:3]])
    with pytest.raises(ValueError, match="no attempts"):
        system_scores([])


def test_a_record_is_checked_when_made():
    with pytest.raises(ValueError, match="failure must be null or one of no_candidate, empty_candidate, untagged"):
        QaAttempt("nq", "q1", 0, False, False, False, "timeout", 1, 1)
    with pytest.raises(ValueError, match="exact match implies both"):
        QaAttempt("nq", "q1", 0, True, False, True, None, 1, 1)
    with pytest.raises(ValueError, match="tokens_read must be an integer ≥ 0"):
        QaAttempt("nq", "q1", 0, False, False, False, None, 1, -1)
    with pytest.raises(ValueError, match="question must be a non-empty string"):
        QaAttempt("nq", "", 0, False, False, False, None, 1, 1)


LINE = {
    "dataset": "nq",
    "question": "test_17",
    "attempt": 2,
    "em": False,
    "sub_em": 1,
    "relaxed_em": True,
    "failure": "untagged",
    "tokens_generated": 812,
    "tokens_read": 3904,
    "answer": "Paris",  # other fields are ignored
}


def test_reading_json_lines(tmp_path):
    path = tmp_path / "attempts.jsonl"
    path.write_text(json.dumps(LINE) + "\n\n" + json.dumps({**LINE, "attempt": 3, "failure": None}) + "\n")
    first, second = read_attempts(path)
    assert first == QaAttempt("nq", "test_17", 2, False, True, True, "untagged", 812, 3904)
    assert first.rescued and not second.rescued
    assert second.attempt == 3 and second.failure is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", r"attempts.jsonl:3: Expecting property name"),
        ("[1, 2]", r"attempts.jsonl:3: expected a JSON object, got list"),
        (
            json.dumps({k: v for k, v in LINE.items() if k not in ("em", "tokens_read")}),
            "missing fields em, tokens_read",
        ),
        (json.dumps({**LINE, "em": 0.5}), r"attempts.jsonl:3: em must be true or false \(or 1 or 0\), got 0.5"),
        (json.dumps({**LINE, "attempt": "2"}), "attempt must be an integer ≥ 0, got '2'"),
        (json.dumps({**LINE, "failure": "missing"}), "failure must be null or one of"),
    ],
)
def test_a_bad_line_is_named_by_its_number(tmp_path, bad, message):
    path = tmp_path / "attempts.jsonl"
    path.write_text(json.dumps(LINE) + "\n\n" + bad + "\n")
    with pytest.raises(ValueError, match=message) as raised:
        read_attempts(path)
    assert str(raised.value).startswith(f"{path}:3: ")


def test_observed_differences_by_hand_and_inside_their_intervals():
    diff = paired_differences(system_a(), system_b(), ("A", "B"))
    # per question, A − B: nq avg@4 (1 − 1/2, 1/4 − 0, 0 − 1/4), pass@4 (0, 1, −1), 4/4 (1, 0, 0);
    # hotpotqa avg@4 (1/2 − 0, 0 − 1), pass@4 (1, −1), 4/4 (0, −1)
    expected = {
        "nq": {"avg_at_k": 1 / 6, "pass_at_k": 0.0, "all_k": 1 / 3},
        "hotpotqa": {"avg_at_k": -1 / 4, "pass_at_k": 0.0, "all_k": -1 / 2},
    }
    macro = {"avg_at_k": -1 / 24, "pass_at_k": 0.0, "all_k": -1 / 12}  # (nq + hotpotqa) / 2
    assert (diff.a, diff.b, diff.k, diff.resamples, diff.seed, diff.confidence) == ("A", "B", 4, 2000, 0, 0.95)
    for dataset, row in expected.items():
        for metric, value in row.items():
            interval = diff.datasets[dataset][metric]
            assert interval.difference == pytest.approx(value, abs=1e-12)
            assert interval.low <= interval.difference <= interval.high
    for metric, value in macro.items():
        assert diff.macro[metric].difference == pytest.approx(value, abs=1e-12)
        assert diff.macro[metric].low <= diff.macro[metric].difference <= diff.macro[metric].high
    # the differences agree with the two systems' scores
    a, b = system_scores(system_a()), system_scores(system_b())
    assert diff.macro["pass_at_k"].difference == pytest.approx(a.macro["pass_at_k"] - b.macro["pass_at_k"])


def test_identical_questions_give_a_zero_width_interval():
    # every question: A answers attempts 0 and 1, B attempt 0; any resample of questions looks the same
    a = [x for d in ("nq", "popqa") for i in range(5) for x in question(d, f"q{i}", "1100")]
    b = [x for d in ("nq", "popqa") for i in range(5) for x in question(d, f"q{i}", "1000")]
    diff = paired_differences(a, b)
    for row in [*diff.datasets.values(), diff.macro]:
        assert row["avg_at_k"] == Interval(0.25, 0.25, 0.25)
        assert row["pass_at_k"] == Interval(0.0, 0.0, 0.0)
        assert row["all_k"] == Interval(0.0, 0.0, 0.0)


def test_pairing_by_question_id():
    # the same system against itself: every resample has difference 0, however varied the questions;
    # B's records come in another order, so pairing by position would not pair them
    a = system_a()
    b = list(reversed(a))
    diff = paired_differences(a, b)
    for row in [*diff.datasets.values(), diff.macro]:
        assert set(row.values()) == {Interval(0.0, 0.0, 0.0)}


def test_reproducible_under_a_seed_and_independent_of_record_order():
    a = [x for i in range(20) for x in question("nq", f"q{i}", format(i % 16, "04b"))]
    b = [x for i in range(20) for x in question("nq", f"q{i}", format((7 * i) % 16, "04b"))]
    first = paired_differences(a, b, resamples=500, seed=11)
    assert paired_differences(a, b, resamples=500, seed=11) == first
    shuffled = list(b)
    random.Random(0).shuffle(shuffled)
    assert paired_differences(list(reversed(a)), shuffled, resamples=500, seed=11) == first
    assert paired_differences(a, b, resamples=500, seed=12) != first


def test_a_question_s_attempts_are_resampled_together():
    # A answers q1 every time and q2 never, B never: the per-question differences are 1 and 0.
    # Resampling the 2 questions: the mean difference is 0, 1/2 or 1 with probabilities 1/4, 1/2,
    # 1/4, so the 2.5% and 97.5% percentiles are 0 and 1.
    # Resampling the 8 attempts one by one instead would give Binomial(8, 1/2) / 8, with
    # P(0) = 1/256 and P(≤ 1/8) = 9/256 > 2.5%: the interval [1/8, 7/8].
    a = [*question("nq", "q1", "1111"), *question("nq", "q2", "0000")]
    b = [*question("nq", "q1", "0000"), *question("nq", "q2", "0000")]
    diff = paired_differences(a, b, seed=5)
    for metric in ("avg_at_k", "pass_at_k"):
        assert diff.datasets["nq"][metric] == Interval(0.5, 0.0, 1.0)
    assert diff.datasets["nq"]["all_k"] == Interval(0.5, 0.0, 1.0)


def test_the_macro_difference_is_recomputed_on_each_resample():
    # two datasets of 4 questions, per-question differences (1, 1, 0, 0) in each. Per dataset the
    # resampled mean is Binomial(4, 1/2) / 4, P(0) = 1/16 > 2.5%: the interval [0, 1]. The macro
    # mean of two independent resamples is Binomial(8, 1/2) / 8, P(0) = 1/256, P(≤ 1/8) = 9/256:
    # its interval [1/8, 7/8] is narrower than the mean of the datasets' bounds, [0, 1].
    def system(answers):
        return [x for d in ("nq", "musique") for i, e in enumerate(answers) for x in question(d, f"q{i}", e)]

    diff = paired_differences(system(["1111", "1111", "0000", "0000"]), system(["0000"] * 4), seed=1)
    for dataset in ("nq", "musique"):
        assert diff.datasets[dataset]["avg_at_k"] == Interval(0.5, 0.0, 1.0)
    assert diff.macro["avg_at_k"] == Interval(0.5, 0.125, 0.875)


def test_systems_must_cover_the_same_questions():
    a = system_a()
    without_q3 = [x for x in system_b() if x.question != "q3"]
    with pytest.raises(ValueError, match=r"dataset 'nq': question 'q3' is in ours's attempts, not in base's"):
        paired_differences(a, without_q3, ("ours", "base"))
    with pytest.raises(ValueError, match=r"dataset 'nq': question 'q3' is in A's attempts, not in B's"):
        paired_differences(a, without_q3)
    with pytest.raises(ValueError, match=r"dataset 'nq': question 'q4' is in B's attempts, not in A's"):
        paired_differences(a, [*system_b(), *question("nq", "q4", "0000")])
    with pytest.raises(ValueError, match=r"dataset 'hotpotqa': in A's attempts, not in B's"):
        paired_differences(a, [x for x in system_b() if x.dataset == "nq"])
    with pytest.raises(ValueError, match="A has k = 4 attempts per question, B has 3"):
        paired_differences(a, [x for x in system_b() if x.attempt < 3])
    with pytest.raises(ValueError, match="resamples must be an integer ≥ 1"):
        paired_differences(a, system_b(), resamples=0)


def test_tables_and_their_markdown():
    tables = qa_tables({"A": system_a(), "B": system_b()}, seed=3)
    assert len(tables) == len(METRICS) + 1
    avg = tables[0]
    assert avg.title == "avg@4: mean EM over attempts" and avg.columns == ["nq", "hotpotqa", MACRO]
    # B: nq (2 + 0 + 1) / 12 = 1/4, hotpotqa (0 + 4) / 8 = 1/2, macro 3/8
    assert avg.rows["B"] == pytest.approx({"nq": 1 / 4, "hotpotqa": 1 / 2, MACRO: 3 / 8})
    assert avg.best == {"nq": ["A"], "hotpotqa": ["B"], MACRO: ["B"]}
    assert tables[METRICS.index("rescued")].best == {}
    text = qa_markdown(tables)
    assert "### avg@4: mean EM over attempts (%)\n\n| system | nq | hotpotqa | Macro |\n|---|---|---|---|\n" in text
    assert "| A | **41.7** | 25.0 | 33.3 |\n| B | 25.0 | **50.0** | **37.5** |" in text
    assert "### 4/4: questions with every attempt correct (%)" in text
    assert "### no candidate: attempts without a candidate answer (count)\n" in text
    assert "| A | 1 | 2 | 1.5 |" in text  # no candidate: nq 1, hotpotqa 2, macro 1.5
    assert "### tokens generated: tokens generated per episode (mean)" in text
    assert "| A | 150 | 200 | 175 |" in text
    differences = tables[-1]
    assert differences.title == "A − B: difference with its 95% paired bootstrap interval (2000 resamples, seed 3)"
    assert (
        differences.rows["avg@4"][MACRO]
        == paired_differences(system_a(), system_b(), ("A", "B"), seed=3).macro["avg_at_k"]
    )
    row = next(line for line in text.splitlines() if line.startswith("| 4/4 | "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # 4/4 differences: nq +1/3, hotpotqa −1/2, macro −1/12, in points
    assert [c.split(" [")[0] for c in cells[1:]] == ["+33.3", "-50.0", "-8.3"]
    assert json.loads(json.dumps(differences.as_dict()))["rows"]["4/4"]["hotpotqa"]["difference"] == -0.5


def test_a_system_missing_a_dataset_has_no_cell_and_no_macro():
    # C has a third dataset, popqa, where A and B have none
    more = [*system_b(), *question("popqa", "p1", "1111")]
    tables = qa_tables({"A": system_a(), "B": system_b(), "C": more}, pairs=[("A", "B")])
    assert tables[0].columns == ["nq", "hotpotqa", "popqa", MACRO]
    assert tables[0].rows["A"]["popqa"] is None and tables[0].rows["A"][MACRO] is None
    assert tables[0].rows["C"][MACRO] == pytest.approx((1 / 4 + 1 / 2 + 1) / 3)
    assert "| A | **41.7** | 25.0 | — | — |" in qa_markdown(tables[:1])
    # the differences table of A − B has the datasets of A and B
    assert tables[-1].columns == ["nq", "hotpotqa", MACRO]
    # a difference needs both systems on the same questions
    with pytest.raises(ValueError, match="dataset 'popqa': in C's attempts, not in B's"):
        qa_tables({"B": system_b(), "C": more}, pairs=[("C", "B")])


def test_the_default_pairs_compare_the_first_system_with_each_other():
    tables = qa_tables({"A": system_a(), "B": system_b(), "C": system_b()}, resamples=10)
    assert [t.title.split(":")[0] for t in tables[len(METRICS) :]] == ["A − B", "A − C"]


def test_tables_refuse_unknown_pairs_and_unequal_k():
    with pytest.raises(ValueError, match="pair \\('A', 'Z'\\): no system 'Z'"):
        qa_tables({"A": system_a(), "B": system_b()}, pairs=[("A", "Z")])
    with pytest.raises(ValueError, match="systems with different k"):
        qa_tables({"A": system_a(), "B": [x for x in system_b() if x.attempt < 2]})


def test_parse_attempts_names_its_source():
    with pytest.raises(ValueError, match="^records:1: missing fields dataset, question"):
        parse_attempts(["{}"], "records")
    assert parse_attempts([json.dumps(LINE)]) == [
        QaAttempt("nq", "test_17", 2, False, True, True, "untagged", 812, 3904)
    ]


def test_the_results_are_json():
    scores = json.loads(json.dumps(system_scores(system_a()).as_dict()))
    assert scores["k"] == 4 and scores["macro"]["tokens_read"] == 2500
    diff = json.loads(json.dumps(paired_differences(system_a(), system_b(), resamples=10).as_dict()))
    assert diff["datasets"]["hotpotqa"]["all_k"]["difference"] == -0.5
    assert set(diff["macro"]) == {"avg_at_k", "pass_at_k", "all_k"}


def test_the_modules_import_without_torch():
    code = "import sys, verl_masopd.report.qa_markdown; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
