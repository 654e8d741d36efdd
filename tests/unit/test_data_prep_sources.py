"""Each converter on the real release samples in ../shared/data and on rows built in the
documented original schemas where the sample is partial."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from data_prep.aime import integer_answer
from data_prep.convert import convert
from data_prep.errors import Dropped
from data_prep.livecodebench import decode_private_tests
from data_prep.olympiadbench import ground_truth
from data_prep.records import Record
from data_prep.schema import read_problems, read_rows
from data_prep.sources import SOURCES
from verl_masopd.workflows.problem import TestCase as Case

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_samples = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA} (shared/ beside the checkout)"
)


def _convert(name: str, source_path: Path, tmp_path: Path, split: str | None = None):
    out = tmp_path / f"{name}.parquet"
    summary = convert(SOURCES[name], source_path, out, split)
    return summary, read_problems(out), read_rows(out)


def _to_row(name: str, fields: dict, split: str = "test") -> dict:
    return SOURCES[name].to_row(Record(fields, 0, "built row"), split)


# --- real samples -------------------------------------------------------------------------


@needs_samples
def test_codecontests_sample_keeps_public_and_generated_tests(tmp_path):
    sample = SHARED_DATA / "codecontests" / "alphacodium_my_problem_example_1575A.json"
    summary, problems, rows = _convert("codecontests", sample, tmp_path, "test")
    assert (summary.read, summary.kept) == (1, 1)
    [problem] = problems
    raw = json.loads(sample.read_text())
    pairs = list(
        zip(
            raw["public_tests"]["input"] + raw["generated_tests"]["input"],
            raw["public_tests"]["output"] + raw["generated_tests"]["output"],
        )
    )
    assert len(problem.tests) == len(dict.fromkeys(pairs))
    assert problem.public_tests == (Case("5 2\nAA\nAB\nBB\nBA\nAZ\n", "5 2 1 3 4 \n"),)
    assert problem.tests[0] == problem.public_tests[0]
    assert problem.reference_solution is None
    assert rows[0]["extra_info"]["split"] == "test"
    counts = json.loads(rows[0]["extra_info"]["metadata"])["test_counts"]
    assert counts == {"public_tests": 1, "private_tests": 0, "generated_tests": 200}


@needs_samples
def test_apps_folders_and_hf_jsonl_give_identical_files(tmp_path):
    folders = SHARED_DATA / "apps" / "original_release_format"
    convert(SOURCES["apps"], folders, tmp_path / "a.parquet", "train")
    hf_jsonl = SHARED_DATA / "apps" / "apps_hf_schema_from_original_files.jsonl"
    convert(SOURCES["apps"], hf_jsonl, tmp_path / "b.parquet", "train")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


@needs_samples
def test_apps_sample_stdin_and_call_based(tmp_path):
    summary, problems, _ = _convert("apps", SHARED_DATA / "apps" / "original_release_format", tmp_path, "train")
    assert summary.kept == 5
    by_id = {p.uid: p for p in problems}
    assert sorted(by_id) == ["1", "111", "2287", "2404", "4184"]
    assert by_id["1"].tests == (Case("3\n2 2 3\n4 3 7\n10 1 9\n", "1\n6\n-1\n"),)
    assert by_id["1"].fn_name is None and by_id["1"].reference_solution.startswith("q=int(input())")
    assert len(by_id["2287"].tests) == 3
    leetcode = by_id["2404"]
    assert leetcode.fn_name == "findKthPositive"
    assert leetcode.tests == (Case("[[2, 3, 4, 7, 11], 5]", "9"),)
    assert "class Solution:" in leetcode.statement and "Starter code:" in leetcode.statement
    codewars = by_id["4184"]
    assert codewars.fn_name == "is_prime"
    assert [json.loads(t.output) for t in codewars.tests] == [False, True, True, False, False, True, True, False]
    assert [json.loads(t.input) for t in codewars.tests][:3] == [[1], [2], [5]]


@needs_samples
def test_livecodebench_sample_decodes_private_tests(tmp_path):
    summary, [problem], rows = _convert("livecodebench", SHARED_DATA / "livecodebench", tmp_path)
    assert summary.kept == 1 and problem.uid == "1873_A"
    assert len(problem.public_tests) == 1 and len(problem.tests) == 5
    assert problem.tests[1] == Case("1\nabc\n", "YES\n")
    assert json.loads(rows[0]["extra_info"]["metadata"])["contest_date"] == "2023-08-21T00:00:00"


@needs_samples
@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_aime_samples_have_30_unpadded_integer_answers(tmp_path, name):
    summary, problems, _ = _convert(name, SHARED_DATA / name, tmp_path)
    assert summary.kept == 30
    assert all(p.answer == str(int(p.answer)) and 0 <= int(p.answer) <= 999 for p in problems)
    raw = [json.loads(line) for line in (SHARED_DATA / name / f"{name}_test.jsonl").read_text().splitlines()]
    assert [p.answer for p in problems] == [str(int(r["answer"])) for r in raw]
    assert len({p.uid for p in problems}) == 30


@needs_samples
def test_aime24_padded_answer_and_ids(tmp_path):
    _, problems, _ = _convert("aime24", SHARED_DATA / "aime24", tmp_path)
    raw = json.loads((SHARED_DATA / "aime24" / "aime24_test.jsonl").read_text().splitlines()[0])
    assert problems[0].uid == str(raw["id"]) == "60"
    padded = [json.loads(line) for line in (SHARED_DATA / "aime24" / "aime24_test.jsonl").read_text().splitlines()]
    assert any(r["answer"] == "025" for r in padded)
    assert "25" in [p.answer for p in problems]


@needs_samples
def test_olympiadbench_sample_answers_parse_with_math_verify(tmp_path):
    from math_verify import parse, verify

    summary, problems, rows = _convert("olympiadbench", SHARED_DATA / "olympiadbench", tmp_path)
    # 2045's "t(0,4]" (a stray letter) and 1782's "m_{\\max }=n^{2}-n-1" are reported, not kept
    assert summary.kept == 48 and summary.read == 50
    assert "ground truth math-verify cannot parse" in summary.format()
    assert {"1782", "2045"}.isdisjoint(p.uid for p in problems)
    by_id = {p.uid: p for p in problems}
    assert by_id["1664"].answer == "69,84"
    assert by_id["1687"].answer == "f(n)=n, g(n)=1"
    assert by_id["1970"].answer == "(-\\infty, 0) \\cup\\{1\\}"
    assert by_id["2253"].answer == "45"
    metadata = {r["extra_info"]["id"]: json.loads(r["extra_info"]["metadata"]) for r in rows}
    assert metadata["2253"]["unit"] == "minute" and metadata["2592"]["error"] == "1e-1"
    assert metadata["1664"]["is_multiple_answer"] is True
    assert metadata["1664"]["answer_rule"] == {"items": "multiset", "tolerance": None}
    assert metadata["2592"]["answer_rule"] == {"items": "ordered", "tolerance": 0.1}
    for problem in problems:
        assert parse(f"${problem.answer}$"), problem.uid
    assert verify(parse(f"${by_id['1664'].answer}$"), parse("\\boxed{84, 69}"))


@needs_samples
def test_polaris_sample_with_renamed_fields(tmp_path):
    summary, problems, rows = _convert("polaris", SHARED_DATA / "polaris", tmp_path)
    assert summary.kept == 5
    assert [p.uid for p in problems] == ["pol:0", "pol:1", "pol:2", "pol:3", "pol:4"]
    assert [p.answer for p in problems][::2] == ["9375", "392", "\\frac{\\sqrt{3}}{4}"]
    assert json.loads(rows[0]["extra_info"]["metadata"]) == {"difficulty": "7/8"}


# --- rows built in the documented original schemas ----------------------------------------


def _codecontests_hf_row(**changes) -> dict:
    row = {
        "name": "1000_A. Sum",
        "description": "Print a+b.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["5 5\n", "1 2\n"], "output": ["10\n", "3\n"]},
        "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
        "source": 2,
        "difficulty": 7,
        "solutions": {
            "language": [2, 1, 3, 3],
            "solution": [
                "int main(){}",
                "print sum(map(int, raw_input().split()))",
                "print(sum(map(int, input().split())))",
                "second",
            ],
        },
        "incorrect_solutions": {"language": [3], "solution": ["print(0)"]},
        "cf_contest_id": 1000,
        "cf_index": "A",
        "cf_points": 500.0,
        "cf_rating": 800,
        "cf_tags": ["math"],
        "is_description_translated": False,
        "untranslated_description": "",
        "time_limit": {"seconds": 2, "nanos": 500000000},
        "memory_limit_bytes": 256000000,
        "input_file": "",
        "output_file": "",
    }
    row.update(changes)
    return row


def test_codecontests_hf_row_picks_first_python3_solution_and_merges_pools():
    row = _to_row("codecontests", _codecontests_hf_row())
    assert row["extra_info"]["reference_solution"] == "print(sum(map(int, input().split())))"
    truth = json.loads(row["reward_model"]["ground_truth"])
    assert truth == {"inputs": ["1 2\n", "5 5\n", "0 0\n"], "outputs": ["3\n", "10\n", "0\n"]}
    assert json.loads(row["extra_info"]["public_tests"]) == {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    metadata = json.loads(row["extra_info"]["metadata"])
    assert metadata["source"] == "codeforces" and metadata["time_limit_s"] == 2.5
    assert metadata["cf_tags"] == ["math"] and metadata["memory_limit_bytes"] == 256000000


def test_codecontests_without_python3_solution_has_no_reference():
    row = _to_row("codecontests", _codecontests_hf_row(solutions={"language": [2, 4], "solution": ["c", "java"]}))
    assert row["extra_info"]["reference_solution"] == ""


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"input_file": "input.txt"}, "reads or writes a named file instead of stdin/stdout"),
        ({"public_tests": None, "private_tests": {"input": [], "output": []}, "generated_tests": None}, "no tests"),
        (
            {"private_tests": {"input": ["1\n"], "output": []}},
            "field 'private_tests' has different numbers of inputs and outputs",
        ),
        ({"description": "  "}, "field 'description' is empty"),
    ],
)
def test_codecontests_bad_rows_are_dropped_with_reason(changes, reason):
    with pytest.raises(Dropped) as caught:
        _to_row("codecontests", _codecontests_hf_row(**changes))
    assert caught.value.reason == reason


def test_codecontests_parquet_shards_selected_by_split(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = tmp_path / "data"
    shards.mkdir()
    pq.write_table(pa.Table.from_pylist([_codecontests_hf_row()]), shards / "test-00000-of-00001.parquet")
    other = _codecontests_hf_row(name="2_B", description="Other.")
    pq.write_table(pa.Table.from_pylist([other]), shards / "train-00000-of-00001.parquet")
    summary, problems, _ = _convert("codecontests", tmp_path, tmp_path, "test")
    assert summary.read == 1 and [p.uid for p in problems] == ["1000_A. Sum"]
    assert problems[0].reference_solution == "print(sum(map(int, input().split())))"


def _apps_hf_row(**changes) -> dict:
    row = {
        "problem_id": 7,
        "question": "Return the word doubled.",
        "solutions": json.dumps(["def double(s):\n    return s * 2\n"]),
        "input_output": json.dumps({"fn_name": "double", "inputs": [["ab"], ["x"]], "outputs": [["abab"], ["xx"]]}),
        "difficulty": "introductory",
        "url": "https://www.codewars.com/kata/0",
        "starter_code": "def double(s):\n\t",
    }
    row.update(changes)
    return row


def test_apps_codewars_outputs_are_unwrapped_but_leetcode_lists_are_kept():
    codewars = _to_row("apps", _apps_hf_row())
    truth = json.loads(codewars["reward_model"]["ground_truth"])
    assert truth == {"inputs": ['["ab"]', '["x"]'], "outputs": ['"abab"', '"xx"']}
    leetcode = _to_row(
        "apps",
        _apps_hf_row(
            url="https://leetcode.com/problems/x/",
            input_output=json.dumps({"fn_name": "f", "inputs": [[[3]]], "outputs": [[3]]}),
        ),
    )
    assert json.loads(leetcode["reward_model"]["ground_truth"]) == {"inputs": ["[[3]]"], "outputs": ["[3]"]}
    assert leetcode["extra_info"]["fn_name"] == "f"


def test_apps_stdin_tests_given_as_lines_are_joined():
    row = _to_row(
        "apps", _apps_hf_row(starter_code="", input_output=json.dumps({"inputs": [["2", "1 2"]], "outputs": [["3"]]}))
    )
    assert json.loads(row["reward_model"]["ground_truth"]) == {"inputs": ["2\n1 2"], "outputs": ["3"]}
    assert row["extra_info"]["fn_name"] == "" and row["prompt"][0]["content"] == "Return the word doubled."


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"input_output": ""}, "no tests"),
        ({"input_output": "{not json"}, "field 'input_output' is not valid JSON"),
        ({"solutions": "[broken"}, "field 'solutions' is not valid JSON"),
        (
            {"input_output": json.dumps({"inputs": ["1"], "outputs": []})},
            "input_output has different numbers of inputs and outputs",
        ),
    ],
)
def test_apps_bad_rows_are_dropped_with_reason(changes, reason):
    with pytest.raises(Dropped) as caught:
        _to_row("apps", _apps_hf_row(**changes))
    assert caught.value.reason == reason


def test_apps_problem_without_solutions_keeps_tests():
    row = _to_row("apps", _apps_hf_row(solutions=""))
    assert row["extra_info"]["reference_solution"] == ""


def _pack_private(tests: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _lcb_functional_row(**changes) -> dict:
    row = {
        "question_title": "max-length",
        "question_content": "Return the longest run.",
        "platform": "leetcode",
        "question_id": "3000",
        "contest_id": "weekly-1",
        "contest_date": "2025-02-01T00:00:00",
        "starter_code": "class Solution:\n    def maxLength(self, nums: List[int], k: int) -> int:\n        ",
        "difficulty": "medium",
        "public_test_cases": json.dumps([{"input": "[1, 2, 2]\n2", "output": "2", "testtype": "functional"}]),
        "private_test_cases": _pack_private(
            [
                {"input": "[]\n0", "output": "0", "testtype": "functional"},
                {"input": '"a\\nb"\n1', "output": "[1, 2]", "testtype": "functional"},
            ]
        ),
        "metadata": json.dumps({"func_name": "maxLength"}),
    }
    row.update(changes)
    return row


def test_livecodebench_functional_tests_become_argument_lists():
    row = _to_row("livecodebench", _lcb_functional_row())
    assert row["extra_info"]["fn_name"] == "maxLength"
    truth = json.loads(row["reward_model"]["ground_truth"])
    assert [json.loads(i) for i in truth["inputs"]] == [[[1, 2, 2], 2], [[], 0], ["a\nb", 1]]
    assert [json.loads(o) for o in truth["outputs"]] == [2, 0, [1, 2]]
    assert json.loads(row["extra_info"]["public_tests"])["inputs"] == ["[[1, 2, 2], 2]"]


def test_livecodebench_private_tests_as_plain_json_string():
    plain = json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])
    assert decode_private_tests(plain) == [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]


def test_livecodebench_refuses_pickles_with_globals():
    hostile = base64.b64encode(zlib.compress(pickle.dumps(Case("a", "b")))).decode()
    with pytest.raises(Dropped, match="cannot be decoded"):
        decode_private_tests(hostile)


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"private_test_cases": "!!not base64!!"}, "field 'private_test_cases' cannot be decoded"),
        ({"metadata": "{}"}, "functional tests without metadata.func_name"),
        ({"public_test_cases": "[]", "private_test_cases": "[]"}, "no tests"),
        (
            {"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}])},
            "test types ['functional', 'stdin'] instead of all stdin or all functional",
        ),
    ],
)
def test_livecodebench_bad_rows_are_dropped_with_reason(changes, reason):
    with pytest.raises(Dropped) as caught:
        _to_row("livecodebench", _lcb_functional_row(**changes))
    assert caught.value.reason == reason


@pytest.mark.parametrize("answer, expected", [("025", "25"), ("0", "0"), (" 204 ", "204"), (70, "70")])
def test_aime_integer_answer(answer, expected):
    assert integer_answer(answer) == expected


@pytest.mark.parametrize("answer", ["1000", "-3", "2.5", "", None])
def test_aime_non_integer_answer_is_dropped(answer):
    with pytest.raises(Dropped, match="not an integer"):
        integer_answer(answer)


def test_aime25_hf_row_without_id_uses_position():
    row = SOURCES["aime25"].to_row(Record({"problem": "Find x.", "answer": "70"}, 4, "built"), "test")
    assert row["extra_info"]["id"] == "4" and row["reward_model"]["ground_truth"] == "70"


@pytest.mark.parametrize(
    "final_answer, expected",
    [
        (["$69$,$84$"], "69,84"),
        (["1,3,5"], "1,3,5"),
        (["$(-\\infty, 0) \\cup\\{1\\}$."], "(-\\infty, 0) \\cup\\{1\\}"),
        (["$3$", "$4$"], "3, 4"),
        ("$7$", "7"),
    ],
)
def test_olympiadbench_ground_truth(final_answer, expected):
    assert ground_truth(final_answer) == expected


def test_olympiadbench_hf_rows_with_images_are_dropped():
    fields = {"id": 1, "question": "Q", "final_answer": ["1"], "image_1": "<PIL image>", "modality": "Multimodal"}
    with pytest.raises(Dropped, match="images"):
        _to_row("olympiadbench", fields)
    with pytest.raises(Dropped, match="no answer"):
        _to_row("olympiadbench", {"id": 2, "question": "Q", "final_answer": ["$ $"]})


def test_polaris_hf_fields_and_verl_parquet_fields():
    hf = _to_row("polaris", {"problem": "What is 2+2?", "answer": " $4$ ", "difficulty": "3/8"}, "train")
    assert hf["reward_model"]["ground_truth"] == "4" and hf["extra_info"]["id"] == "0"
    verl = _to_row(
        "polaris",
        {
            "prompt": [{"role": "user", "content": "What is 3+3?"}],
            "reward_model": {"ground_truth": "6", "style": "rule"},
        },
        "train",
    )
    assert verl["extra_info"]["problem"] == "What is 3+3?" and verl["reward_model"]["ground_truth"] == "6"
    with pytest.raises(Dropped, match="no answer"):
        _to_row("polaris", {"problem": "Prove it.", "answer": ""})
