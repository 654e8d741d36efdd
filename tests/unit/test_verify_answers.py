"""Answer extraction, program-output comparison and math equivalence through real math-verify."""

import subprocess
import sys
import threading

import pytest

from verl_masopd.verify import extract_boxed, extract_hash_answer, extract_program_answer, math_equal, outputs_match


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
    ],
)
def test_outputs_match(actual, expected, tol, match):
    assert outputs_match(actual, expected, tol) is match


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
