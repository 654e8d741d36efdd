"""check-solutions runs reference solutions in the real sandbox against their golden tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.__main__ import main
from data_prep.builtin import builtin_rows
from data_prep.check_solutions import check_solutions
from data_prep.convert import convert
from data_prep.sources import SOURCES
from data_prep.writer import write_rows

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_apps_sample_references_pass_their_tests(tmp_path):
    out = tmp_path / "apps.parquet"
    convert(SOURCES["apps"], SHARED_DATA / "apps" / "original_release_format", out, "train")
    report = check_solutions(out, max_workers=2)
    assert report.failures == []
    assert (report.checked, report.passed, report.pass_rate) == (5, 5, 1.0)


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
