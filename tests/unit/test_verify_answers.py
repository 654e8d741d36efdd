"""Answer extraction, program-output comparison and math equivalence through real math-verify."""

import subprocess
import sys
import threading

import pytest

from verl_masopd.verify import (
    DEFAULT_FLOAT_TOL,
    extract_boxed,
    extract_hash_answer,
    extract_program_answer,
    math_equal,
    outputs_agree,
    outputs_match,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("#### 1\nthen again\n####  \\frac{1}{2} \nmore", "\\frac{1}{2}"),
        ("no marker", None),
        ("trailing ####   ", None),
    ],
)
def test_extract_hash_answer(text, expected):
    assert extract_hash_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{1} then \\boxed{\\frac{a}{b^{2}}}", "\\frac{a}{b^{2}}"),
        ("answer \\boxed {42}.", "42"),
        ("\\boxed{5} and a cut \\boxed{\\frac{1}{", "5"),
        ("nothing", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "stdout, expected",
    [
        ("step 1\nstep 2\n\\boxed{12}\ntrailer\n", "12"),
        ("working\n#### 3/4\n", "3/4"),
        ("debug\n  0.25  \n\n", "0.25"),
        ("", None),
        ("\n \n", None),
    ],
)
def test_extract_program_answer(stdout, expected):
    assert extract_program_answer(stdout) == expected


@pytest.mark.parametrize(
    "actual, expected, tol, match",
    [
        ("1 2\n3\n", "1 2 3", None, True),
        ("  YES \r\n", "YES", None, True),
        ("1 2", "1 2 3", None, False),
        ("yes", "YES", None, False),
        ("0.3333333", "0.333333333", None, False),
        ("0.3333333", "0.333333333", 1e-6, True),
        ("1000000.5", "1000000.0", 1e-6, True),
        ("0.5", "0.6", 1e-6, False),
        ("abc 1.0", "abc 1", 1e-9, True),
        ("abc", "abd", 1e-3, False),
        ("", "", None, True),
        ("0.3333333333333333", "0.333333", DEFAULT_FLOAT_TOL, True),
        ("0.333", "0.333333", DEFAULT_FLOAT_TOL, False),
        ("2.5e-7", "0.0000003", DEFAULT_FLOAT_TOL, True),
        ("3.0", "3", DEFAULT_FLOAT_TOL, True),
        ("3.0000001", "3", DEFAULT_FLOAT_TOL, False),
        ("1000000000000000001", "1000000000000000000", DEFAULT_FLOAT_TOL, False),
        ("007", "7", DEFAULT_FLOAT_TOL, False),
        ("1_000", "1000", DEFAULT_FLOAT_TOL, False),
        ("inf", "1e999", DEFAULT_FLOAT_TOL, False),
        ("nan", "nan", DEFAULT_FLOAT_TOL, True),
        ("1e99999999999999999999", "1.5", DEFAULT_FLOAT_TOL, False),
    ],
)
def test_outputs_match(actual, expected, tol, match):
    assert outputs_match(actual, expected, tol) is match


@pytest.mark.parametrize(
    "actual, expected, fn_name, match",
    [
        ("1", "1.0", "f", True),
        ("1.0", "1", "f", True),
        ("true", "1", "f", True),
        ("false", "0", "f", True),
        ("true", "2", "f", False),
        ('"a\\n  b"', '"a b"', "f", False),
        ('"1"', "1", "f", False),
        ("null", "0", "f", False),
        ("null", "null", "f", True),
        ("[1,2]", "[1, 2]", "f", True),
        ("[1, 2]", "[1, 2, 3]", "f", False),
        ("[1]", "1", "f", False),
        ("[0.3333333333333333, 2]", "[0.333333, 2.0]", "f", True),
        ("[0.34]", "[0.333333]", "f", False),
        ("2.0000001", "2", "f", False),
        ('{"a": [1.0], "b": true}', '{"b": 1, "a": [1]}', "f", True),
        ('{"a": 1}', '{"b": 1}', "f", False),
        ("printed text", "printed  text", "f", True),
        ("0.3333333333333333", "0.333333", "", True),
        ("YES", "yes", "", False),
    ],
)
def test_outputs_agree_one_rule_for_stdin_and_call_based(actual, expected, fn_name, match):
    """Call-based outputs compare as JSON values, numbers within the float tolerance, booleans as
    1 and 0; text that is not JSON (and every stdin output) compares token by token."""
    assert outputs_agree(actual, expected, fn_name) is match


def test_outputs_agree_without_tolerance_compares_numbers_exactly():
    assert not outputs_agree("0.3333333333333333", "0.333333", "", None)
    assert not outputs_agree("[0.3333333333333333]", "[0.333333]", "f", None)
    assert outputs_agree("[1.0]", "[1]", "f", None)


@pytest.mark.parametrize(
    "pred, gold, equal",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("1/2", "\\frac{1}{2}", True),
        ("0.5", "1/2", True),
        ("\\boxed{\\frac{2}{4}}", "0.5", True),
        ("\\dfrac12", "0.5", True),
        ("1, 2", "2, 1", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("5 \\text{ cm}", "5", True),
        ("3", "4", False),
        ("1, 2", "1, 3", False),
        ("", "1", False),
        ("\\frac{1}{", "1", False),
    ],
)
def test_math_equal(pred, gold, equal):
    assert math_equal(pred, gold) is equal


def test_math_equal_off_the_main_thread():
    results = []
    threads = [threading.Thread(target=lambda: results.append(math_equal("2/4", "\\frac{1}{2}"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True, True, True]


def test_math_cli():
    def cli(pred, gold):
        command = [sys.executable, "-m", "verl_masopd.verify", "math", pred, gold]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()

    assert cli("\\frac{3}{6}", "0.5") == "true"
    assert cli("7", "8") == "false"
