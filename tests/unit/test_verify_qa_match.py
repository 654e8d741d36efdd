"""QA exact match (SQuAD normalisation), sub-EM, relaxed EM, golden-answer forms and the CLI."""

import json
import subprocess
import sys

import numpy as np
import pytest

from verl_masopd.verify.__main__ import main
from verl_masopd.verify.qa_match import (
    answer_matches,
    exact_match,
    golden_answers,
    normalize_answer,
    relaxed_match,
    relaxed_normalize,
    sub_exact_match,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Beatles", "beatles"),
        ("  A  Tale of\tTwo Cities. ", "tale of two cities"),
        ("an apple, the end!", "apple end"),
        ("Theatre", "theatre"),  # "the" only as a word
        ("U.S.A.", "usa"),
        ("“Quit India”", "“quit india”"),  # curly quotes are not ASCII punctuation
        ("", ""),
    ],
)
def test_normalize_answer_is_squads(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "prediction, golds, em",
    [
        ("the Beatles!", ["Beatles"], True),
        ("Beatles", "The Beatles", True),
        ("rolling stones", ["Beatles", "The Rolling Stones"], True),  # any golden answer
        ("George VI", ["George VI\n"], True),  # Bamboogle's trailing newline
        ("james madison", ["James Madison"], True),
        ("14 December 1972", ["14 December 1972 UTC", "December 1972"], False),
        ("Röntgen", ["Rontgen"], False),  # accents are kept
        ("O’Brien", ["O'Brien"], False),  # the curly quote is kept, the ASCII one dropped
        ("two", ["2"], False),  # plain EM: "two" is not "2"
        ("2", ["two"], False),
        ("", ["The"], False),  # empty after normalisation never matches
        ("The", ["the"], False),
        ("", [""], False),
        (None, ["anything"], False),
        ("Paris", [], False),
        ("Paris", None, False),
    ],
)
def test_exact_match(prediction, golds, em):
    assert exact_match(prediction, golds) is em


def test_sub_exact_match_is_character_containment():
    assert sub_exact_match("He was born in 1990 in Paris.", ["paris"])
    assert sub_exact_match("1990", ["1"])  # characters, as Search-R1's subem
    assert not sub_exact_match("London", ["Paris", "Lyon"])
    assert not sub_exact_match("anything at all", ["The"])  # a gold empty after normalising matches nothing
    assert not sub_exact_match("", ["a"])


@pytest.mark.parametrize(
    "prediction, gold",
    [
        ("two", "2"),
        ("Twelve Angry Men", "12 angry men"),
        ("zero", "0"),
        ("twenty", "20"),
        ("Wilhelm Conrad Rontgen", "Wilhelm Conrad Röntgen"),
        ("Ségolène Royal", "Segolene Royal"),
        ("O’Brien", "O'Brien"),
        ("“Quit India”", '"Quit India"'),
        ("ﬁre", "fire"),
        ("STRASSE", "Straße"),
        ("１２", "12"),  # full-width digits
    ],
)
def test_relaxed_match_reads_the_same_answer_written_differently(prediction, gold):
    assert relaxed_match(prediction, [gold]) and relaxed_match(gold, [prediction])
    assert relaxed_normalize(prediction) == relaxed_normalize(gold)


def test_relaxed_match_contains_exact_match_and_no_more_than_its_rules():
    assert relaxed_match("the Beatles", ["Beatles"])
    assert not relaxed_match("twenty one", ["21"])  # only zero to twenty, one word each
    assert not relaxed_match("Paris, France", ["Paris"])
    assert not relaxed_match("", ["zero"])


@pytest.mark.parametrize(
    "golds, expected",
    [
        ("Paris", ["Paris"]),
        (["Paris", "paris"], ["Paris", "paris"]),
        (("a", "b"), ["a", "b"]),
        (np.array(["politician", "pol"], dtype=object), ["politician", "pol"]),
        (np.array(["x"]), ["x"]),
        ('["politician", "political leader"]', ["politician", "political leader"]),  # PopQA's JSON string
        ({"target": np.array(["a", "b"], dtype=object)}, ["a", "b"]),  # Search-R1's ground truth
        ([1990, None, "x"], ["1990", "x"]),
        ("[not json", ["[not json"]),
        ('{"a": 1}', ['{"a": 1}']),
        (None, []),
    ],
)
def test_golden_answer_forms(golds, expected):
    assert golden_answers(golds) == expected


def test_popqa_json_string_and_numpy_golds_match():
    assert exact_match("political leader", '["politician", "political leader"]')
    assert exact_match("pol", np.array(["politician", "pol"], dtype=object))
    assert exact_match("1990", [1990])


@pytest.mark.parametrize(
    "prediction",
    [None, 42, 3.5, b"Paris", "\ud800", "\x00\u200b\ufeff", "Z\u0351\u0352\u0357" * 1000, "the " * 500_000],
)
def test_untrusted_predictions_never_raise(prediction):
    for mode in ("em", "subem", "relaxed"):
        assert answer_matches(prediction, ["Paris"], mode) in (True, False)


def test_huge_prediction():
    huge = "word " * 2_000_000 + "Paris"
    assert not exact_match(huge, ["Paris"])
    assert sub_exact_match(huge, ["Paris"])


def test_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of em, subem, relaxed"):
        answer_matches("a", ["a"], "f1")


def test_em_cli_in_process(capsys):
    def cli(*argv):
        assert main(["em", *argv]) == 0
        return capsys.readouterr().out.strip()

    assert cli("The Beatles!", "beatles") == "true"
    assert cli("two", "2") == "false"
    assert cli("two", "2", "--mode", "relaxed") == "true"
    assert cli("--mode=subem", "born in 1990", "1990") == "true"
    assert cli("rolling stones", "Beatles", "The Rolling Stones") == "true"
    assert cli("-5", "-5") == "true"  # answers may start with "-"
    assert cli("", "Paris") == "false"
    assert cli("pol", json.dumps(["politician", "pol"])) == "true"


def test_em_cli_subprocess():
    command = [sys.executable, "-m", "verl_masopd.verify", "em", "George VI", "George VI\n"]
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "true\n"
    missing_gold = subprocess.run(command[:4] + ["x"], capture_output=True, text=True)
    assert missing_gold.returncode == 2 and "required: gold" in missing_gold.stderr
