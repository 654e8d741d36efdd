"""The tiny world's math task family: an arithmetic ladder for the Reasoner–Tool-User workflow.

Levels (problem i is at level `LEVELS[i % 4]`, its numbers drawn from `random.Random(i)` alone):
  L1  one operation (+, −, ×) on one-digit numbers            "What is 7 - 3?"
  L2  two operations on one-digit numbers (× binds first)       "What is 2 + 3 * 4?"
  L3  two-digit ± two-digit, or two-digit × one-digit           "What is 47 + 38?"
  L4  short word problems with numbers ≤ 9                      "Ann has 3 pens and gets 4 more. ..."
Every problem carries its expression e (Python syntax) with y* = eval(e), an integer; the
Tool-User's reference program is `print(e)`.

Index ranges: training problems are [0, HELDOUT_START), held-out (test) problems start at
HELDOUT_START and validation problems, for choosing settings, at VALIDATION_START, so the three
are disjoint as indices (L1's few hundred distinct statements recur in all of them, as any sample
of one-digit sums would).
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass

from data_prep.schema import math_row

LEVELS = (1, 2, 3, 4)
HELDOUT_START = 1_000_000
VALIDATION_START = 2_000_000
DATA_SOURCE = "tiny_math_L{level}"
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_WORDS = (
    ("{n} has {a} {thing} and gets {b} more. How many {thing} does {n} have now?", "{a} + {b}"),
    ("{n} has {a} {thing} and gives away {b}. How many {thing} are left?", "{a} - {b}"),
    ("{n} buys {a} bags with {b} {thing} in each. How many {thing} is that?", "{a} * {b}"),
    ("{n} has {a} {thing}, finds {b} and loses {c}. How many {thing} does {n} have?", "{a} + {b} - {c}"),
)
_NAMES = ("Ann", "Bob", "Eve", "Tom", "Max", "Sue")
_THINGS = ("pens", "apples", "cards", "coins", "eggs", "books")


@dataclass(frozen=True)
class MathTask:
    """One problem of the ladder: statement, expression e (Python) and answer y* = eval(e)."""

    index: int
    level: int
    statement: str
    expression: str
    answer: int


def task(i: int) -> MathTask:
    """Problem i of the ladder (a function of i alone)."""
    if i < 0:
        raise ValueError(f"problem index must be >= 0, got {i}")
    rng = random.Random(f"tiny-math-{i}")
    level = LEVELS[i % len(LEVELS)]
    if level == 1:
        op = rng.choice("+-*")
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        if op == "-" and b > a:
            a, b = b, a
        expression = f"{a} {op} {b}"
        statement = f"What is {expression}?"
    elif level == 2:
        a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        expression = f"{a} {rng.choice('+-*')} {b} {rng.choice('+-')} {c}"
        statement = f"What is {expression}?"
    elif level == 3:
        op = rng.choice("+-*")
        a = rng.randint(10, 99)
        b = rng.randint(2, 9) if op == "*" else rng.randint(10, 99)
        if op == "-" and b > a:
            a, b = b, a
        expression = f"{a} {op} {b}"
        statement = f"What is {expression}?"
    else:
        template, form = rng.choice(_WORDS)
        a, b, c = rng.randint(2, 9), rng.randint(1, 9), rng.randint(1, 9)
        if "-" in form and b > a:
            a, b = b, a
        values = dict(a=a, b=b, c=min(c, a + b), n=rng.choice(_NAMES), thing=rng.choice(_THINGS))
        statement = template.format(**values)
        expression = form.format(**values)
    return MathTask(i, level, statement, expression, evaluate(expression))


def evaluate(expression: str) -> int:
    """The value of an expression of integers and + − × with the usual precedence (no eval)."""
    tokens = expression.split()
    terms, signs = [int(tokens[0])], []
    for op, number in zip(tokens[1::2], tokens[2::2], strict=True):
        if op == "*":
            terms[-1] = terms[-1] * int(number)
        else:
            signs.append(op)
            terms.append(int(number))
    value = terms[0]
    for op, term in zip(signs, terms[1:], strict=True):
        value = _OPS[op](value, term)
    return value


def reference_program(t: MathTask) -> str:
    return f"print({t.expression})\n"


def math_rows(start: int, count: int, split: str) -> list[dict]:
    """Problems [start, start + count) as rows of the project's schema (data_prep.schema)."""
    rows = []
    for i in range(start, start + count):
        t = task(i)
        row = math_row(
            data_source=DATA_SOURCE.format(level=t.level),
            uid=f"tiny-math-{i}",
            split=split,
            statement=t.statement,
            answer=str(t.answer),
            reference_solution=reference_program(t),
            metadata={"level": t.level, "expression": t.expression},
        )
        row["extra_info"]["index"] = i
        rows.append(row)
    return rows
