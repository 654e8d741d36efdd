"""What a program finds in the sandbox as the judges provide it: the prelude names, stdin programs
valid only as a function body (APPS's harness runs them inside one), SystemExit, call-based prints."""

import json

import pytest

from verl_masopd.sandbox import run_many, run_program, wrap_call_based

TOP_LEVEL_RETURN = """n = int(input())
if n % 2:
    print("odd")
    return
print("even")
"""

MODULE_LEVEL_NONLOCAL = """total = 0
def add(x):
    nonlocal total
    total += x
for v in map(int, input().split()):
    add(v)
print(total)
"""

NESTED_NONLOCAL = """best = []
def solve():
    def visit(v):
        nonlocal best
        best = best + [v]
    for v in map(int, input().split()):
        visit(v)
solve()
print(*best)
"""

GLOBAL_AND_RETURN = """best = 0
def visit(v):
    global best
    best = max(best, v)
values = list(map(int, input().split()))
if not values:
    print("empty")
    return
for v in values:
    visit(v)
print(best)
"""

STAR_IMPORT_AND_RETURN = """from __future__ import annotations
from math import *
n = int(input())
if n < 0:
    return
print(isqrt(n))
"""

STDIN_PRELUDE = """print(inf > 10**18, factorial(5), comb(5, 2), gcd(12, 18), isqrt(17))
print(SortedList([3, 1, 2])[0], ascii_lowercase[:3], deque([1, 2]).pop(), Counter("aab")["a"])
print(bisect_left([1, 3], 2), list(accumulate([1, 2, 3])), reduce(max, [4, 9]), List[int])
print(pow(3, 4, 5), abs(-2), math.floor(2.5), bisect.bisect_right([1, 3], 3), copy.deepcopy([1]))
print(heappop([2, 5]), list(combinations([1, 2, 3], 2))[0], sys.maxsize > 0)
"""

STDIN_PRELUDE_OUTPUT = """True 120 10 6 4
1 abc 2 2
1 [1, 3, 6] 9 typing.List[int]
1 2 2 2 [1]
2 (1, 2) True
"""


@pytest.mark.parametrize(
    "code, stdin, expected",
    [
        (TOP_LEVEL_RETURN, "3\n", "odd\n"),
        (TOP_LEVEL_RETURN, "4\n", "even\n"),
        (MODULE_LEVEL_NONLOCAL, "1 2 3\n", "6\n"),
        (NESTED_NONLOCAL, "4 5\n", "4 5\n"),
        (GLOBAL_AND_RETURN, "3 9 4\n", "9\n"),
        (GLOBAL_AND_RETURN, "\n", "empty\n"),
        (STAR_IMPORT_AND_RETURN, "17\n", "4\n"),
        (STAR_IMPORT_AND_RETURN, "-1\n", ""),
        (STDIN_PRELUDE, "", STDIN_PRELUDE_OUTPUT),
        ("from sortedcontainers import SortedDict\nprint(SortedDict({2: 1, 1: 0}).peekitem(0))\n", "", "(1, 0)\n"),
    ],
    ids=[
        "return-odd",
        "return-even",
        "nonlocal",
        "nested-nonlocal",
        "global-and-return",
        "global-and-return-early",
        "star-import-and-return",
        "star-import-return-early",
        "prelude-names",
        "sortedcontainers-import",
    ],
)
def test_stdin_programs_run_as_judges_run_them(code, stdin, expected):
    result = run_program(code, stdin)
    assert result.ok, result
    assert result.stdout == expected


def test_function_body_program_keeps_line_numbers_and_reports_real_syntax_errors():
    crash, invalid = run_many(
        [
            ("n = int(input())\nif n == 0:\n    return\nprint(10 // (n - 1))\n", "1\n"),
            ("x = 1\ndef f():\n    nonlocal y\n", ""),
        ],
        timeout=10.0,
    )
    assert crash.error == "exit code 1: ZeroDivisionError: integer division or modulo by zero"
    assert 'File "main.py", line 4' in crash.stderr
    assert invalid.error == "syntax error: no binding for nonlocal 'y' found (line 3)"


@pytest.mark.parametrize(
    "code, exit_code, stdout",
    [
        ("exit(print(5))\nprint(6)\n", 0, "5\n"),
        ("import sys\nprint(1)\nsys.exit()\n", 0, "1\n"),
        ("print(7)\nraise SystemExit\n", 0, "7\n"),
        ("print(8)\nquit()\n", 0, "8\n"),
        ("n = int(input())\nif n:\n    print(n)\n    exit()\n    return\nprint(0)\n", 0, "4\n"),
        ("print(2)\nexit('NO')\n", 1, "2\n"),
    ],
    ids=["exit-print", "sys-exit", "raise", "quit", "exit-in-function-body", "exit-with-message"],
)
def test_system_exit(code, exit_code, stdout):
    """SystemExit ends the program with its code; code None or 0 is a clean finish, any other
    code a failed run (docs/method.md, failed runs), and a message goes to stderr as CPython prints it."""
    result = run_program(code, "4\n")
    assert (result.exit_code, result.stdout) == (exit_code, stdout), result
    assert result.ok is (exit_code == 0)
    if exit_code:
        assert result.stderr == "NO\n"


CALL_BASED_PRELUDE = """class Solution:
    def add(self, nums: List[int], k: int) -> List[Any]:
        window = SortedList(nums)
        return [window[0], factorial(k), inf > k, comb(k, 2), gcd(*nums), ascii_lowercase[k], pow(2, k, 5)]
"""


def test_call_based_programs_get_the_same_prelude():
    result = run_program(wrap_call_based(CALL_BASED_PRELUDE, "add"), "[[6, 4, 8], 3]")
    assert result.ok, result
    assert json.loads(result.stdout) == [4, 6, True, 3, 2, "d", 3]


def test_call_based_prints_go_to_stderr():
    code = "def add(a, b):\n    print('debug', a)\n    return a + b\n"
    result = run_program(wrap_call_based(code, "add"), "[2, 3]")
    assert result.ok and result.stdout == "5\n" and result.stderr == "debug 2\n"
