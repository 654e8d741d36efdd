"""check-solutions runs reference solutions in the real sandbox against their golden tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from data_prep.__main__ import main
from data_prep.builtin import builtin_rows
from data_prep.check_solutions import check_solutions
from data_prep.convert import convert
from data_prep.schema import code_row, read_problems
from data_prep.sources import SOURCES
from data_prep.writer import write_rows
from verl_masopd.workflows.execution_matrix import run_matrix
from verl_masopd.workflows.problem import TestCase as Case

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_apps_sample_references_pass_their_tests(tmp_path):
    out = tmp_path / "apps.parquet"
    convert(SOURCES["apps"], SHARED_DATA / "apps" / "original_release_format", out, "train")
    report = check_solutions(out, max_workers=2)
    assert report.failures == []
    assert (report.checked, report.passed, report.pass_rate) == (5, 5, 1.0)


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_every_solution_of_two_apps_sample_problems_passes(tmp_path):
    """Every solution APPS ships for 2287 and 2404, not only the first (68): three of 2287's end
    with a top-level `return`, ten of 2404's print while they are called. (4184's sixth solution
    sieves up to 10^7 on every call: seconds of CPU per test, left out.)"""
    apps = SOURCES["apps"]
    rows = []
    for folder in ("2287", "2404"):
        [record] = apps.records(SHARED_DATA / "apps" / "original_release_format" / "train" / folder, "train")
        for number, solution in enumerate(json.loads(record.fields["solutions"])):
            fields = dict(record.fields, problem_id=f"{folder}-{number}", solutions=json.dumps([solution]))
            rows.append(apps.to_row(dataclasses.replace(record, fields=fields), "train"))
    out = tmp_path / "every_solution.parquet"
    write_rows(rows, out)
    report = check_solutions(out, max_workers=2)
    assert report.failures == []
    assert report.checked == report.passed == 68


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_builtin_references_pass_and_a_broken_one_is_reported(tmp_path):
    rows = builtin_rows("code", 4) + builtin_rows("math", 1)
    rows[1]["extra_info"]["reference_solution"] = "input()\nprint(0)\n"
    rows[2]["extra_info"]["reference_solution"] = ""
    path = tmp_path / "mixed.parquet"
    write_rows(rows, path)
    report = check_solutions(path, max_workers=2)
    assert (report.checked, report.passed, report.without_reference, report.not_code) == (3, 2, 1, 1)
    [failure] = report.failures
    assert failure.uid == "code-1" and failure.total == 5
    outputs = json.loads(rows[1]["reward_model"]["ground_truth"])["outputs"]
    assert failure.failed == sum(output != "0\n" for output in outputs)
    assert "wrong output" in failure.first_reason
    assert report.pass_rate == pytest.approx(2 / 3)


def test_cli_limits_and_prints_pass_rate(tmp_path, capsys):
    path = tmp_path / "code.parquet"
    write_rows(builtin_rows("code", 4), path)
    assert main(["check-solutions", str(path), "--limit", "2", "--workers", "2"]) == 0
    assert capsys.readouterr().out.startswith("checked 2 reference solutions: 2 pass all their tests (100.0%)")


def test_cli_exits_non_zero_when_a_reference_fails(tmp_path, capsys):
    rows = builtin_rows("code", 2)
    rows[0]["extra_info"]["reference_solution"] = "input()\nprint(0)\n"
    path = tmp_path / "broken.parquet"
    write_rows(rows, path)
    assert main(["check-solutions", str(path), "--workers", "2"]) == 1
    assert "FAIL code-0" in capsys.readouterr().out


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_samples_without_references_are_counted_not_run(tmp_path):
    inputs = {
        "codecontests": SHARED_DATA / "codecontests" / "alphacodium_my_problem_example_1575A.json",
        "livecodebench": SHARED_DATA / "livecodebench",
    }
    for name, source_path in inputs.items():
        out = tmp_path / f"{name}.parquet"
        convert(SOURCES[name], source_path, out, "test")
        report = check_solutions(out)
        assert (report.checked, report.without_reference, report.not_code) == (0, 1, 0)


MOD = 10**9 + 7
# (uid, reference, fn_name, tests, whether it passes): one per failure class real references showed
# (a runner defect or a comparison without float tolerance), and two wrong references.
AGREEMENT_CASES = [
    (
        "top-level-return",
        'n = int(input())\nif n % 2:\n    print("odd")\n    return\nprint("even")\n',
        "",
        [("3\n", "odd\n"), ("4\n", "even\n")],
        True,
    ),
    (
        "module-level-nonlocal",
        "total = 0\ndef add(x):\n    nonlocal total\n    total += x\nfor v in map(int, input().split()):\n"
        "    add(v)\nprint(total)\n",
        "",
        [("1 2 3\n", "6\n")],
        True,
    ),
    (
        "inf-in-stdin-program",
        "input()\nbest = inf\nfor v in map(int, input().split()):\n    best = min(best, v)\nprint(best)\n",
        "",
        [("3\n5 2 7\n", "2\n")],
        True,
    ),
    (
        "factorial-call-based",
        "class Solution:\n    def count(self, n: int) -> int:\n        return factorial(n) % (10**9 + 7)\n",
        "count",
        [("[5]", "120"), ("[20]", str(2432902008176640000 % MOD))],
        True,
    ),
    (
        "sortedlist-call-based",
        "class Solution:\n    def medians(self, nums: List[int]) -> List[int]:\n        seen = SortedList()\n"
        "        out = []\n        for x in nums:\n            seen.add(x)\n"
        "            out.append(seen[(len(seen) - 1) // 2])\n"
        "        return out\n",
        "medians",
        [("[[5, 1, 3, 2]]", "[5, 1, 3, 2]")],
        True,
    ),
    ("float-more-digits", "a, b = map(int, input().split())\nprint(a / b)\n", "", [("1 3\n", "0.333333\n")], True),
    ("one-vs-one-point-zero", "def mean(xs):\n    return sum(xs) / len(xs)\n", "mean", [("[[1, 1]]", "1")], True),
    ("true-vs-one", "def even(n):\n    return n % 2 == 0\n", "even", [("[2]", "1"), ("[3]", "0")], True),
    ("prints-while-called", "def add(a, b):\n    print(a)\n    return a + b\n", "add", [("[2, 3]", "5")], True),
    (
        "string-whitespace",
        "def join(words):\n    return '\\n  '.join(words)\n",
        "join",
        [('[["a", "b"]]', '"a b"')],
        False,
    ),
    ("float-off", "print(0.3334)\n", "", [("", "0.333333\n")], False),
]


def test_check_solutions_and_the_reward_agree_on_every_failure_class(tmp_path):
    rows = [
        code_row(
            data_source="apps",
            uid=uid,
            split="test",
            statement=uid,
            tests=[Case(i, o) for i, o in tests],
            reference_solution=code,
            fn_name=fn_name,
            metadata={},
        )
        for uid, code, fn_name, tests, _ in AGREEMENT_CASES
    ]
    path = tmp_path / "classes.parquet"
    write_rows(rows, path)
    report = check_solutions(path, max_workers=2)
    failing = {uid for uid, *_, passes in AGREEMENT_CASES if not passes}
    assert {f.uid for f in report.failures} == failing, report.format()
    assert report.passed == len(AGREEMENT_CASES) - len(failing)
    for problem in read_problems(path):
        [row] = run_matrix([problem.reference_solution], list(problem.tests), problem.fn_name)
        assert all(row) is (problem.uid not in failing), problem.uid


def test_cli_float_tolerance(tmp_path, capsys):
    row = code_row(
        data_source="apps",
        uid="third",
        split="test",
        statement="print a / b",
        tests=[Case("1 3\n", "0.333333\n")],
        reference_solution="a, b = map(int, input().split())\nprint(a / b)\n",
        metadata={},
    )
    path = tmp_path / "float.parquet"
    write_rows([row], path)
    assert main(["check-solutions", str(path), "--workers", "1"]) == 0
    assert main(["check-solutions", str(path), "--workers", "1", "--float-tol", "1e-9"]) == 1
    assert "FAIL third: 1/1 tests fail, first: test 0: wrong output '0.3333333333333333\\n'" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["check-solutions", str(path), "--float-tol", "-1"])
    assert "argument --float-tol: must be in [0, 1), got -1" in capsys.readouterr().err
