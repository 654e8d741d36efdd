"""Ordinary executions: outputs, error strings agents see, call-based wrapping, the pool, the CLI."""

import glob
import json
import math
import subprocess
import sys
import uuid

import pytest

from verl_masopd.sandbox import ExecResult, Limits, run_many, run_program, wrap_call_based
from verl_masopd.sandbox.limits import MAX_LIMITS, MAX_SECONDS


def test_sums_stdin():
    result = run_program("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "3 4 5\n")
    assert result.ok and result.error is None
    assert result.stdout == "12\n" and result.exit_code == 0 and not result.truncated


def test_runtime_error_is_reported_without_sandbox_frames():
    result = run_program("x = 1\nprint(x / 0)\n")
    assert not result.ok and result.exit_code == 1
    assert result.error == "exit code 1: ZeroDivisionError: division by zero"
    assert 'File "main.py", line 2' in result.stderr and "<string>" not in result.stderr


def test_syntax_error():
    result = run_program("def f(:\n    return 1\n")
    assert result.exit_code == 1
    assert result.error.startswith("syntax error: ") and result.error.endswith("(line 1)")


def test_explicit_exit_code_and_empty_output():
    result = run_program("import sys\nsys.exit(3)\n")
    assert result.exit_code == 3 and result.error == "exit code 3" and result.stdout == ""


def test_binary_and_empty_programs_never_raise():
    assert run_program("").ok
    result = run_program("\x00\udcff garbage")
    assert result.exit_code == 1 and result.error.startswith("syntax error")


def test_program_runs_as_main_with_its_directory_on_path():
    code = (
        "import os\nopen('helper.py', 'w').write('VALUE = 7')\nimport helper\n"
        "if __name__ == '__main__':\n    print(helper.VALUE)\n"
    )
    assert run_program(code).stdout == "7\n"


def test_working_directory_is_removed():
    marker = f"marker-{uuid.uuid4().hex}"
    assert run_program(f"open({marker!r}, 'w').write('x')").ok
    assert glob.glob(f"/tmp/masopd-sandbox-*/{marker}") == []


def test_file_size_limit():
    result = run_program("open('big', 'wb').write(b'x' * (3 * 1024 * 1024))", limits=Limits(file_size_mb=1))
    assert result.exit_code == 1 and "File too large" in result.error


@pytest.mark.parametrize(
    "code, stdin, expected",
    [
        ("def add(a, b):\n    return a + b\n", "[2, 3]", "5"),
        ("class Solution:\n    def add(self, a, b):\n        return [a, b]\n", "[2, 3]", "[2, 3]"),
        ("def add(words, sep):\n    return sep.join(words)\n", '[["a", "b"], "-"]', '"a-b"'),
        (
            "class Solution:\n    def add(self, nums: List[int], k: Optional[int]) -> List[Any]:\n"
            "        heapify(nums)\n        counts = Counter(nums)\n"
            "        return [heappop(nums), len(deque(nums)), bisect_left([1, 3], 2), math.gcd(4, 6),\n"
            "                pow(2, 10, 1000), counts[3], list(accumulate([1, 2])), reduce(max, [4, 9]), k]\n",
            "[[3, 1, 2], null]",
            "[1, 2, 1, 2, 24, 1, [1, 3], 9, null]",
        ),
    ],
    ids=["function", "solution-method", "json-values", "leetcode-prelude"],
)
def test_call_based_wrapping(code, stdin, expected):
    result = run_program(wrap_call_based(code, "add"), stdin)
    assert result.ok, result
    assert json.loads(result.stdout) == json.loads(expected)


def test_call_based_line_numbers_are_the_solutions():
    result = run_program(wrap_call_based("def add(a, b):\n    return a / b\n", "add"), "[1, 0]")
    assert result.error == "exit code 1: ZeroDivisionError: division by zero"
    assert 'File "main.py", line 2, in add' in result.stderr


def test_run_many_keeps_order_and_isolates_failures():
    jobs = [(f"print({i} * {i})", "") for i in range(6)] + [("raise ValueError('bad')", "")]
    results = run_many(jobs, timeout=10.0, max_workers=3)
    assert [r.stdout for r in results[:6]] == [f"{i * i}\n" for i in range(6)]
    assert results[6].error == "exit code 1: ValueError: bad"
    assert run_many([]) == []


def test_exec_result_ok_property():
    assert ExecResult("", "", 0, False, 0.1, None).ok
    assert not ExecResult("", "", None, True, 0.1, "timeout after 1.0s").ok
    with pytest.raises(ValueError, match="Limits.memory_mb"):
        Limits(memory_mb=0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"timeout": 1e9}, "timeout must be a number of seconds above 0, at most 86400 (a day), got 1000000000.0"),
        ({"timeout": math.inf}, "timeout must be a number of seconds above 0, at most 86400 (a day), got inf"),
        ({"timeout": math.nan}, "timeout must be a number of seconds above 0, at most 86400 (a day), got nan"),
        ({"timeout": 0}, "timeout must be a number of seconds above 0, at most 86400 (a day), got 0"),
        ({"timeout": "5"}, "timeout must be a number of seconds above 0, at most 86400 (a day), got '5'"),
        ({"slot_wait": -1}, "slot_wait must be a number of seconds 0 or more, at most 86400 (a day), got -1"),
        ({"slot_wait": 2e5}, "slot_wait must be a number of seconds 0 or more, at most 86400 (a day), got 200000.0"),
        ({"limits": "cpu_seconds"}, "Limits.cpu_seconds must be a positive int of at most 86400, got 100000000000"),
        ({"limits": "processes"}, "Limits.processes must be a positive int of at most 4194304, got 100000000000"),
        ({"limits": "memory_mb"}, "Limits.memory_mb must be a positive int of at most 1048576, got 100000000000"),
        ({"limits": "output_bytes"}, "Limits.output_bytes must be a positive int of at most 1073741824, got True"),
    ],
)
def test_unrepresentable_timeouts_and_limits_are_refused(arguments, message):
    """A timeout, wait or limit the OS or Python cannot represent is the caller's error, said in
    one line, before anything runs."""
    with pytest.raises(ValueError) as refused:
        if "limits" in arguments:
            name = arguments["limits"]
            Limits(**{name: True if name == "output_bytes" else 10**11})
        else:
            run_program("print(1)", **arguments)
    assert str(refused.value) == message


def test_the_largest_timeout_and_limits_run():
    result = run_program("print(1)", timeout=MAX_SECONDS, limits=Limits(**MAX_LIMITS), slot_wait=MAX_SECONDS)
    assert result.ok and result.stdout == "1\n", result


def test_cli_prints_one_json_object(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text("print(input()[::-1])")
    completed = subprocess.run(
        [sys.executable, "-m", "verl_masopd.sandbox", "run", "--timeout", "5", str(program)],
        input="abc\n",
        capture_output=True,
        text=True,
        check=True,
    )
    outcome = json.loads(completed.stdout)
    assert outcome["stdout"] == "cba\n" and outcome["ok"] is True and outcome["error"] is None


def test_call_based_solution_with_future_import():
    """A future statement still comes first after wrapping; line numbers stay the solution's."""
    code = '"""Doc."""\nfrom __future__ import annotations\n\n\ndef add(a: List[int], b) -> int:\n    return a[0] / b\n'
    ok = run_program(wrap_call_based(code, "add"), "[[6], 3]")
    assert ok.ok and ok.stdout.strip() == "2.0", ok
    failed = run_program(wrap_call_based(code, "add"), "[[6], 0]")
    assert "line 6" in failed.stderr and "ZeroDivisionError" in failed.error, failed
