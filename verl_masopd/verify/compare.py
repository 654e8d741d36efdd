"""Program-output comparison: the one rule for the reward, the agents' agreement and check-solutions.

Stdin programs: the outputs' whitespace-separated tokens, pairwise. Tokens a (actual) and e
(expected) match when they are the same text, or both are decimal numbers and
  - e is an integer literal: a has a fraction or an exponent and a = e exactly (`3.0` matches
    `3`, `3.0000001` does not; two different integer texts such as `007` and `7` never match);
  - e has a fraction or an exponent: |a − e| ≤ tol or |a − e| ≤ tol·max(|a|, |e|), the absolute
    or relative error competitive-programming checkers accept (tol = DEFAULT_FLOAT_TOL unless
    set; with None, tokens match only as the same text).
`nan`, `inf` and other words `float()` accepts are text, not numbers.

Call-based programs: the JSON values (the return value the wrapped program prints against the
test's JSON), structurally: lists element by element, objects key by key, strings exactly, and
numbers as the tokens above (with tol None: equal values). Booleans are the integers 1 and 0, as
in the Python judges of APPS, LiveCodeBench and LeetCode (`true` matches `1`; `1` matches `1.0`).
When either side is not JSON the two are compared as stdin outputs.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation

DEFAULT_FLOAT_TOL = 1e-6

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


def _numbers_match(actual: Decimal, expected: Decimal, integer: bool, float_tol: float | None) -> bool:
    if actual == expected:
        return True
    if integer or float_tol is None:
        return False
    return math.isclose(float(actual), float(expected), rel_tol=float_tol, abs_tol=float_tol)


def _tokens_match(actual: str, expected: str, float_tol: float | None) -> bool:
    if actual == expected:
        return True
    if float_tol is None or not (_NUMBER.fullmatch(actual) and _NUMBER.fullmatch(expected)):
        return False
    integer = bool(_INTEGER.fullmatch(expected))
    if integer and _INTEGER.fullmatch(actual):
        return False
    try:
        a, e = Decimal(actual), Decimal(expected)
    except InvalidOperation:  # an exponent beyond what Decimal holds
        return False
    return _numbers_match(a, e, integer, float_tol)


def outputs_match(actual: str, expected: str, float_tol: float | None = DEFAULT_FLOAT_TOL) -> bool:
    """Whether a stdin program's output matches the expected one (module doc)."""
    actual_tokens, expected_tokens = actual.split(), expected.split()
    return len(actual_tokens) == len(expected_tokens) and all(
        _tokens_match(a, e, float_tol) for a, e in zip(actual_tokens, expected_tokens)
    )


def values_match(actual, expected, float_tol: float | None = DEFAULT_FLOAT_TOL) -> bool:
    """Whether two decoded JSON values match (module doc)."""
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if not (math.isfinite(actual) and math.isfinite(expected)):
            return actual == expected
        return _numbers_match(Decimal(actual), Decimal(expected), isinstance(expected, int), float_tol)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(
            values_match(a, e, float_tol) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(
            values_match(actual[k], expected[k], float_tol) for k in expected
        )
    return type(actual) is type(expected) and actual == expected


def outputs_agree(actual: str, expected: str, fn_name: str | None, float_tol: float | None = DEFAULT_FLOAT_TOL) -> bool:
    """Whether a program's stdout matches the expected output of a test: JSON values for a
    call-based problem (`fn_name` set), stdin tokens otherwise (module doc)."""
    if fn_name:
        try:
            return values_match(json.loads(actual), json.loads(expected), float_tol)
        except (ValueError, RecursionError):
            pass
    return outputs_match(actual, expected, float_tol)
