"""Runs forked from the sandbox zygote: a normal Python for every program, no state carried
from one run to the next, and a zygote that is restarted when it dies and not shared by forks."""

import os
import signal

import pytest

from verl_masopd.sandbox import run_many, run_program
from verl_masopd.sandbox import zygote as sandbox_zygote

MUTATE = """
import builtins, collections, json, os, sys
json.dumps = None
collections.deque = None
sys.path.insert(0, "/leaked")
sys.modules["leaked_module"] = sys
builtins.leaked = 1
builtins.print = None
os.environ["LEAKED"] = "1"
sys.setrecursionlimit(77)
"""

INSPECT = """
import builtins, collections, json, os, sys
print(json.dumps([1]), collections.deque.__name__, "/leaked" in sys.path, "leaked_module" in sys.modules,
      hasattr(builtins, "leaked"), "LEAKED" in os.environ, sys.getrecursionlimit())
"""

PRISTINE = "[1] deque False False False False 1000\n"


@pytest.fixture
def zygotes(children_running):
    """A function listing this process's zygote (a direct child running the sandbox bootstrap)."""
    return lambda: children_running(sandbox_zygote.ZYGOTE_MARK)


def test_no_state_leaks_between_sequential_runs():
    assert run_program(INSPECT).stdout == PRISTINE
    mutated = run_program(MUTATE)
    assert mutated.ok, mutated
    assert run_program(INSPECT).stdout == PRISTINE


def test_no_state_leaks_between_concurrent_runs():
    jobs = [(MUTATE, ""), (INSPECT, "")] * 4
    results = run_many(jobs, max_workers=4)
    assert all(result.ok for result in results), results
    assert [result.stdout for result in results[1::2]] == [PRISTINE] * 4


@pytest.mark.parametrize(
    "code, stdin, stdout, exit_code",
    [
        ("import sys\nprint(sys.argv, __name__, __file__)", "", "['main.py'] __main__ main.py\n", 0),
        ("a = input()\nb = input()\nprint(int(a) + int(b))", "2\n40\n", "42\n", 0),
        ("import sys\nprint(len(sys.stdin.read()))", "x" * 100_000, "100000\n", 0),
        ("print('before')\nexit()\nprint('after')", "", "before\n", 0),
        ("import sys\nsys.exit(3)", "", "", 3),
        ("import sys\nsys.exit('bye')", "", "", 1),
        ("if __name__ == '__main__':\n    print('main block')", "", "main block\n", 0),
        ("import atexit\natexit.register(lambda: print('at exit'))\nprint('body')", "", "body\nat exit\n", 0),
        (
            "import sys, threading\nsys.setrecursionlimit(10 ** 6)\nthreading.stack_size(1 << 26)\n"
            "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
            "def main():\n    print(depth(100_000))\nthreading.Thread(target=main).start()\n",
            "",
            "100000\n",
            0,
        ),
        ("import os\nos.close(1)\nprint('to a closed stdout')", "", "", 120),
        ("out = open(1, 'w', closefd=False)\nout.write('never closed')", "", "never closed", 0),
        ("class Last:\n    def __del__(self):\n        print('finalized')\nkept = Last()", "", "finalized\n", 0),
        ("import sys\nsys.exit(256 + 7)", "", "", 7),
    ],
    ids=[
        "argv",
        "input",
        "stdin-read",
        "exit",
        "sys-exit-3",
        "sys-exit-message",
        "main-block",
        "atexit",
        "deep-recursion-thread",
        "closed-stdout",
        "unclosed-file",
        "finalizer",
        "exit-code-modulo",
    ],
)
def test_programs_see_a_normal_python(code, stdin, stdout, exit_code):
    result = run_program(code, stdin, timeout=10.0)
    assert (result.stdout, result.exit_code) == (stdout, exit_code), result
    if exit_code == 1:
        assert result.error == "exit code 1: bye"


@pytest.mark.skipif(os.geteuid() != 0, reason="the zygote of an unprivileged caller may be killed by its programs")
def test_a_killed_zygote_is_replaced(zygotes):
    assert run_program("print(1)").ok
    [first] = zygotes()
    first.send_signal(signal.SIGKILL)
    first.wait(5)
    result = run_program("print(2)")
    assert result.ok and result.stdout == "2\n"
    [second] = zygotes()
    assert second.pid != first.pid


def test_closing_stops_the_zygote_and_the_next_run_starts_one(zygotes):
    assert run_program("print(1)").ok
    [first] = zygotes()
    sandbox_zygote.close()
    assert not first.is_running()
    assert zygotes() == []
    assert run_program("print(3)").stdout == "3\n"
    assert len(zygotes()) == 1


def test_a_forked_child_starts_its_own_zygote(zygotes):
    assert run_program("print(1)").ok
    [parent_zygote] = zygotes()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            result = run_program("print(6 * 7)")
            report = f"{result.stdout.strip()} {len(zygotes())}"
        except BaseException as error:
            report = repr(error)
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        report = reader.read()
    os.waitpid(child, 0)
    assert report == "42 1"
    assert [z.pid for z in zygotes()] == [parent_zygote.pid]
    assert run_program("print(5)").stdout == "5\n"


def test_zygote_never_holds_the_callers_environment(zygotes, monkeypatch):
    monkeypatch.setenv("MASOPD_TEST_SECRET", "hunter2-secret")
    sandbox_zygote.close()
    result = run_program("import os\nprint(sorted(os.environ))")
    assert result.ok and "MASOPD_TEST_SECRET" not in result.stdout
    [started] = zygotes()
    assert "MASOPD_TEST_SECRET" not in started.environ()
    assert sorted(started.environ()) == sorted(sandbox_zygote.ZYGOTE_ENV)
