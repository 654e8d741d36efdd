"""Small synthetic datasets in the project's schema, for tests and the tiny offline world.

Code: stdin/stdout and call-based problems with a Python reference solution and tests computed
from the problem's own rule. Math: arithmetic with exact integer answers. Problem i depends only
on i, so the first n problems are the same for every n.
"""

from __future__ import annotations

import json
import random

from data_prep.schema import code_row, math_row
from verl_masopd.workflows.problem import CODE, MATH, TestCase

TESTS_PER_PROBLEM = 5


def _linear(k: int, rng: random.Random):
    statement = f"Read two integers a and b from one line, separated by a space. Print a * {k} + b."
    solution = f"a, b = map(int, input().split())\nprint(a * {k} + b)\n"
    tests = []
    for _ in range(TESTS_PER_PROBLEM):
        a, b = rng.randint(-100, 100), rng.randint(-100, 100)
        tests.append(TestCase(f"{a} {b}\n", f"{a * k + b}\n"))
    return statement, solution, tests, ""


def _sum_above(k: int, rng: random.Random):
    statement = (
        f"The first line holds an integer n, the second line n integers. "
        f"Print the sum of those integers that are greater than {k}."
    )
    solution = f"input()\nprint(sum(x for x in map(int, input().split()) if x > {k}))\n"
    tests = []
    for _ in range(TESTS_PER_PROBLEM):
        values = [rng.randint(-20, 20) for _ in range(rng.randint(1, 8))]
        line = " ".join(map(str, values))
        tests.append(TestCase(f"{len(values)}\n{line}\n", f"{sum(x for x in values if x > k)}\n"))
    return statement, solution, tests, ""


def _repeat_word(k: int, rng: random.Random):
    statement = f"Read one word of lowercase letters. Print it {k + 1} times in a row, without spaces."
    solution = f"print(input().strip() * {k + 1})\n"
    tests = []
    for _ in range(TESTS_PER_PROBLEM):
        word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 6)))
        tests.append(TestCase(f"{word}\n", f"{word * (k + 1)}\n"))
    return statement, solution, tests, ""


def _count_multiples(k: int, rng: random.Random):
    divisor = k + 1
    statement = (
        f"Write a Python function `count_multiples(values)` that returns how many integers in the "
        f"list `values` are divisible by {divisor}."
    )
    solution = f"def count_multiples(values):\n    return sum(1 for v in values if v % {divisor} == 0)\n"
    tests = []
    for _ in range(TESTS_PER_PROBLEM):
        values = [rng.randint(0, 50) for _ in range(rng.randint(0, 8))]
        tests.append(TestCase(json.dumps([values]), json.dumps(sum(1 for v in values if v % divisor == 0))))
    return statement, solution, tests, "count_multiples"


CODE_TEMPLATES = (_linear, _sum_above, _repeat_word, _count_multiples)


def code_rows(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        template = CODE_TEMPLATES[i % len(CODE_TEMPLATES)]
        statement, solution, tests, fn_name = template(i // len(CODE_TEMPLATES) + 1, random.Random(i))
        row = code_row(
            data_source="builtin_code",
            uid=f"code-{i}",
            split="train",
            statement=statement,
            tests=tests,
            public_tests=tests[:1],
            reference_solution=solution,
            fn_name=fn_name,
            metadata={"template": template.__name__.lstrip("_")},
        )
        rows.append(_indexed(row, i))
    return rows


def math_rows(n: int) -> list[dict]:
    """Problem i asks for a * b + c (even i) or a * (b - c) (odd i), with a = i + 2 so texts differ."""
    rows = []
    for i in range(n):
        rng = random.Random(i)
        a, b, c = i + 2, rng.randint(1, 20), rng.randint(1, 20)
        if i % 2 == 0:
            statement, answer = f"Compute {a} \\times {b} + {c}.", a * b + c
        else:
            statement, answer = f"Compute {a} \\times ({b} - {c}).", a * (b - c)
        row = math_row(
            data_source="builtin_math",
            uid=f"math-{i}",
            split="train",
            statement=statement,
            answer=str(answer),
            metadata={"template": "product_plus" if i % 2 == 0 else "product_of_difference"},
        )
        rows.append(_indexed(row, i))
    return rows


def builtin_rows(domain: str, n: int) -> list[dict]:
    """The first `n` built-in problems of `domain` ("code" or "math") as rows."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if domain == CODE:
        return code_rows(n)
    if domain == MATH:
        return math_rows(n)
    raise ValueError(f"domain must be {CODE!r} or {MATH!r}, got {domain!r}")


def _indexed(row: dict, index: int) -> dict:
    row["extra_info"]["index"] = index
    return row
