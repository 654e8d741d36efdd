"""The tiny world's code task family: templated stdin problems for the Coder–Tester workflow.

Every problem reads one line from standard input (numbers or a word) and prints one line. A
family is one statement template, one short reference program (a single `print`) and the function
f it computes; `{k}` (a digit) and `{c}` (a letter) are the problem's parameters. Levels (problem i
is at level `LEVELS[i % 4]`, its family, parameters and golden tests drawn from
`random.Random(f"tiny-code-{i}")` alone):
  L1  one aggregate of a line of numbers      sum, largest, smallest, how many
  L2  one operation on a word                 reversed, letters sorted, count of a letter, capitals
  L3  reorder a line of numbers               reversed, ascending, descending
  L4  a parameter k                           how many > k, how many equal k, each plus k, sum times k
Golden tests: `GOLDEN_TESTS` inputs drawn from the problem's rng, expected outputs f(input); the
reference program prints the same (checked through the sandbox in the tests).

Index ranges: training problems are [0, HELDOUT_START), held-out problems start at HELDOUT_START
and validation problems at VALIDATION_START (math_tasks' convention): disjoint as indices, with
disjoint golden tests; the few dozen distinct statements recur in all three, as the ladder's L1
statements do.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from data_prep.schema import code_row
from verl_masopd.workflows.problem import TestCase

LEVELS = (1, 2, 3, 4)
DATA_SOURCE = "tiny_code_L{level}"
GOLDEN_TESTS = 3
NUMBERS, WORD = "numbers", "word"
LETTERS = "abcdefgh"
_READ = "map(int,input().split())"


def _line(values) -> str:
    return " ".join(str(v) for v in values)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split()]


@dataclass(frozen=True)
class Family:
    """A statement template, its reference program template and f: (input line, k, c) → output."""

    name: str
    level: int
    kind: str
    statement: str
    program: str
    compute: Callable[[str, int, str], str]


FAMILIES = (
    Family("sum", 1, NUMBERS, "Print the sum.", f"print(sum({_READ}))", lambda s, k, c: str(sum(_ints(s)))),
    Family("max", 1, NUMBERS, "Print the largest.", f"print(max({_READ}))", lambda s, k, c: str(max(_ints(s)))),
    Family("min", 1, NUMBERS, "Print the smallest.", f"print(min({_READ}))", lambda s, k, c: str(min(_ints(s)))),
    Family("count", 1, NUMBERS, "Print how many.", "print(len(input().split()))", lambda s, k, c: str(len(s.split()))),
    Family("reverse_word", 2, WORD, "Print it reversed.", "print(input()[::-1])", lambda s, k, c: s[::-1]),
    Family(
        "sort_word",
        2,
        WORD,
        "Print its letters sorted.",
        "print(''.join(sorted(input())))",
        lambda s, k, c: "".join(sorted(s)),
    ),
    Family(
        "count_letter",
        2,
        WORD,
        "Print how often {c} occurs.",
        "print(input().count('{c}'))",
        lambda s, k, c: str(s.count(c)),
    ),
    Family("upper", 2, WORD, "Print it in capitals.", "print(input().upper())", lambda s, k, c: s.upper()),
    Family(
        "reverse",
        3,
        NUMBERS,
        "Print them reversed.",
        "print(*input().split()[::-1])",
        lambda s, k, c: _line(s.split()[::-1]),
    ),
    Family(
        "ascending",
        3,
        NUMBERS,
        "Print them ascending.",
        f"print(*sorted({_READ}))",
        lambda s, k, c: _line(sorted(_ints(s))),
    ),
    Family(
        "descending",
        3,
        NUMBERS,
        "Print them descending.",
        f"print(*sorted({_READ},reverse=True))",
        lambda s, k, c: _line(sorted(_ints(s), reverse=True)),
    ),
    Family(
        "count_above",
        4,
        NUMBERS,
        "Print how many are above {k}.",
        f"print(sum(x>{{k}} for x in {_READ}))",
        lambda s, k, c: str(sum(x > k for x in _ints(s))),
    ),
    Family(
        "count_equal",
        4,
        NUMBERS,
        "Print how many equal {k}.",
        f"print(sum(x=={{k}} for x in {_READ}))",
        lambda s, k, c: str(sum(x == k for x in _ints(s))),
    ),
    Family(
        "plus",
        4,
        NUMBERS,
        "Print each plus {k}.",
        f"print(*[x+{{k}} for x in {_READ}])",
        lambda s, k, c: _line(x + k for x in _ints(s)),
    ),
    Family(
        "times",
        4,
        NUMBERS,
        "Print the sum times {k}.",
        f"print(sum({_READ})*{{k}})",
        lambda s, k, c: str(sum(_ints(s)) * k),
    ),
)
_LEAD = {NUMBERS: "Input: numbers on one line.", WORD: "Input: a word."}


@dataclass(frozen=True)
class CodeTask:
    """One problem: its family and parameters, statement, reference program and golden tests."""

    index: int
    family: Family
    k: int
    c: str
    statement: str
    reference: str
    tests: tuple[TestCase, ...]

    @property
    def level(self) -> int:
        return self.family.level

    def output(self, line: str) -> str:
        """The correct output f(line) (one line, no newline)."""
        return self.family.compute(line, self.k, self.c)


def random_input(kind: str, rng: random.Random, small: bool = False) -> str:
    """One input line: 1–6 numbers in 0..9 (`small`: 2–4) or 0..99, or a word of 2–7 letters."""
    if kind == WORD:
        return "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 5 if small else 7)))
    top = 9 if small else 99
    return _line(rng.randint(0, top) for _ in range(rng.randint(2, 4) if small else rng.randint(1, 6)))


def task(i: int) -> CodeTask:
    """Problem i of the family (a function of i alone)."""
    if i < 0:
        raise ValueError(f"problem index must be >= 0, got {i}")
    rng = random.Random(f"tiny-code-{i}")
    level = LEVELS[i % len(LEVELS)]
    family = rng.choice([f for f in FAMILIES if f.level == level])
    k, c = rng.randint(1, 9), rng.choice(LETTERS)
    statement = f"{_LEAD[family.kind]} {family.statement.format(k=k, c=c)}"
    reference = family.program.format(k=k, c=c) + "\n"
    inputs = [random_input(family.kind, rng, small=n == 0) for n in range(GOLDEN_TESTS)]
    tests = tuple(TestCase(line + "\n", family.compute(line, k, c) + "\n") for line in inputs)
    return CodeTask(i, family, k, c, statement, reference, tests)


def code_rows(start: int, count: int, split: str) -> list[dict]:
    """Problems [start, start + count) as rows of the project's code schema (data_prep.schema):
    hidden golden tests and the reference solution."""
    rows = []
    for i in range(start, start + count):
        t = task(i)
        row = code_row(
            data_source=DATA_SOURCE.format(level=t.level),
            uid=f"tiny-code-{i}",
            split=split,
            statement=t.statement,
            tests=list(t.tests),
            reference_solution=t.reference,
            metadata={"level": t.level, "family": t.family.name, "k": t.k, "c": t.c},
        )
        row["extra_info"]["index"] = i
        rows.append(row)
    return rows
