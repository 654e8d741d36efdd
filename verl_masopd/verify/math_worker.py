"""Worker process for math_equal: one JSON request [pred, gold, timeout] per stdin line, one reply line.

Runs math-verify on its main thread, where math-verify's own signal-based timeouts work. One
comparison before "ready" loads math-verify's lazy parts (the LaTeX grammar, sympy's printers), so
that a request's deadline measures the comparison alone.
"""

from __future__ import annotations

import json
import sys

from math_verify import parse, verify


def _as_math(text: str) -> str:
    """Bare answers ("1/2", "\\frac{1}{2}", "1, 2") are read as inline LaTeX."""
    return text if "\\boxed" in text or "$" in text else f"${text}$"


def equal(pred: str, gold: str, timeout: int) -> bool:
    gold_parsed = parse(_as_math(gold), parsing_timeout=timeout)
    pred_parsed = parse(_as_math(pred), parsing_timeout=timeout)
    return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


def serve() -> None:
    equal("(1, -2)", "(\\frac{2}{2}, -2)", 60)
    print("ready", flush=True)
    for line in sys.stdin:
        pred, gold, timeout = json.loads(line)
        try:
            answer = equal(pred, gold, timeout)
        except Exception:
            answer = False
        print("true" if answer else "false", flush=True)


if __name__ == "__main__":
    serve()
