"""Program-output comparison: whitespace-normalised tokens, optional float tolerance."""

from __future__ import annotations

import math


def _as_float(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _tokens_match(actual: str, expected: str, float_tol: float | None) -> bool:
    if actual == expected:
        return True
    if float_tol is None:
        return False
    a, e = _as_float(actual), _as_float(expected)
    return a is not None and e is not None and math.isclose(a, e, rel_tol=float_tol, abs_tol=float_tol)


def outputs_match(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """True when both outputs have the same whitespace-separated tokens; with `float_tol`,
    numeric tokens a, e also match when |a − e| ≤ float_tol or |a − e| ≤ float_tol·max(|a|, |e|)."""
    actual_tokens, expected_tokens = actual.split(), expected.split()
    return len(actual_tokens) == len(expected_tokens) and all(
        _tokens_match(a, e, float_tol) for a, e in zip(actual_tokens, expected_tokens)
    )
