"""Wrap a call-based solution (APPS / LiveCodeBench functional tests) into a stdin/stdout program."""

from __future__ import annotations

import json

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
    """A program that defines `code`, reads ONE JSON list of positional arguments from stdin,
    calls `fn_name` (method of `Solution()` if that class defines it, else the top-level
    function) and prints `json.dumps(result)`."""
    return code + _ENTRY.format(name=json.dumps(fn_name))
