"""Wrap a call-based solution (APPS / LiveCodeBench functional tests) into a stdin/stdout program."""

from __future__ import annotations

import json
import re

# What LeetCode's and APPS' harnesses make available without an import, on ONE line so that a
# solution's line numbers move by exactly one: the typing names (List, Optional, Dict, ...),
# the modules bisect, collections, functools, heapq, itertools, math, re and string, and every
# public name of bisect, collections, functools, heapq and itertools (deque, Counter,
# defaultdict, lru_cache, reduce, heappush, bisect_left, accumulate, ...). math's names are not
# star-imported: math.pow would shadow the builtin three-argument pow.
PRELUDE = (
    "from typing import *; import bisect, collections, functools, heapq, itertools, math, re, string; "
    "from bisect import *; from collections import *; from functools import *; from heapq import *; "
    "from itertools import *\n"
)

# Future statements must precede every other statement: they move onto the prelude's line and
# leave an empty line behind, so line numbers still move by exactly one.
_FUTURE = re.compile(r"^from __future__ import [^\n]*$", re.MULTILINE)

_ENTRY = """

def _masopd_call_entry():
    import json, sys
    arguments = json.loads(sys.stdin.read())
    solution = globals().get("Solution")
    if isinstance(solution, type) and hasattr(solution, {name}):
        target = getattr(solution(), {name})
    else:
        target = globals()[{name}]
    print(json.dumps(target(*arguments)))


_masopd_call_entry()
"""


def wrap_call_based(code: str, fn_name: str) -> str:
    """A program that runs PRELUDE and `code`, reads ONE JSON list of positional arguments from
    stdin, calls `fn_name` (method of `Solution()` if that class defines it, else the top-level
    function) and prints `json.dumps(result)`."""
    head = "; ".join([*_FUTURE.findall(code), PRELUDE.rstrip("\n")])
    return f"{head}\n{_FUTURE.sub('', code)}{_ENTRY.format(name=json.dumps(fn_name))}"
