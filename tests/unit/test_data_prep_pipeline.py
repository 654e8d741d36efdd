"""The shared conversion run: summary, de-duplication, limit, determinism, atomic writing,
validation on read, the command line and the built-in datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep.__main__ import main
from data_prep.builtin import builtin_rows
from data_prep.convert import convert
from data_prep.dedup import normalised_text
from data_prep.errors import DataError
from data_prep.schema import ROW_SCHEMA, read_problems, read_rows
from data_prep.sources import SOURCES
from data_prep.writer import write_rows

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


AIME_LIKE = [
    {"problem": "Find  the answer.", "answer": "007"},
    {"problem": "find the ANSWER.\n", "answer": "7"},
    {"problem": "Find x.", "answer": "1.5"},
    {"problem": "Find y."},
    {"problem": "Find z.", "answer": "12"},
]


def test_summary_counts_kept_duplicates_and_drop_reasons(tmp_path):
    source = _jsonl(tmp_path / "in.jsonl", AIME_LIKE)
    summary = convert(SOURCES["aime25"], source, tmp_path / "out.parquet")
    assert (summary.read, summary.kept) == (5, 2)
    assert dict(summary.dropped) == {"duplicate problem text": 1, "answer is not an integer 0-999": 2}
    assert summary.examples["duplicate problem text"] == [f"{source}:2"]
    text = summary.format()
    assert text.splitlines()[0] == "aime25: read 5, kept 2, dropped 3"
    assert "dropped 2: answer is not an integer 0-999" in text
    rows = read_rows(tmp_path / "out.parquet")
    assert [(r["extra_info"]["index"], r["extra_info"]["id"], r["reward_model"]["ground_truth"]) for r in rows] == [
        (0, "0", "7"),
        (1, "4", "12"),
    ]


def test_normalised_text_ignores_case_and_whitespace():
    assert normalised_text("  Find\tthe\n\nANSWER. ") == normalised_text("find the answer.") == "find the answer."
    assert normalised_text("ﬁnd") == "find"


def test_limit_stops_after_n_kept_rows(tmp_path):
    source = _jsonl(tmp_path / "in.jsonl", AIME_LIKE)
    summary = convert(SOURCES["aime25"], source, tmp_path / "out.parquet", limit=1)
    assert (summary.read, summary.kept) == (1, 1)
    assert len(read_rows(tmp_path / "out.parquet")) == 1


def test_same_input_gives_same_bytes(tmp_path):
    source = _jsonl(tmp_path / "in.jsonl", AIME_LIKE)
    convert(SOURCES["aime25"], source, tmp_path / "a.parquet")
    convert(SOURCES["aime25"], source, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_no_kept_rows_writes_nothing(tmp_path):
    source = _jsonl(tmp_path / "in.jsonl", [{"problem": "P", "answer": "x"}])
    with pytest.raises(DataError, match="no aime25 row kept, nothing written"):
        convert(SOURCES["aime25"], source, tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == [source]


def test_bad_line_midway_leaves_previous_output_untouched(tmp_path):
    out = tmp_path / "out.parquet"
    convert(SOURCES["aime25"], _jsonl(tmp_path / "good.jsonl", AIME_LIKE), out)
    before = out.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "Find q.", "answer": "1"}) + "\n{oops\n")
    with pytest.raises(DataError, match=rf"{bad}:2: not a JSON line"):
        convert(SOURCES["aime25"], bad, out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl", "out.parquet"]


def test_missing_input_and_unsupported_format_are_named(tmp_path):
    with pytest.raises(DataError, match="nowhere.jsonl: no such file or directory"):
        convert(SOURCES["aime24"], tmp_path / "nowhere.jsonl", tmp_path / "out.parquet")
    (tmp_path / "data.csv").write_text("problem,answer\n")
    with pytest.raises(DataError, match=r"data.csv: unsupported file type"):
        convert(SOURCES["aime24"], tmp_path / "data.csv", tmp_path / "out.parquet")
    (tmp_path / "scalar.json").write_text("3")
    with pytest.raises(DataError, match="expected a JSON object or a list of objects, got int"):
        convert(SOURCES["aime24"], tmp_path / "scalar.json", tmp_path / "out.parquet")


def _written(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "rows.parquet"
    write_rows(rows, path)
    return path


def test_read_problems_names_file_row_and_field(tmp_path):
    rows = builtin_rows("code", 3)
    rows[2]["extra_info"]["metadata"] = "[1]"
    path = _written(tmp_path, rows)
    with pytest.raises(DataError, match=rf"{path}: row 2: field 'extra_info.metadata' is not a JSON object"):
        read_problems(path)
    rows = builtin_rows("code", 2)
    rows[1]["reward_model"]["ground_truth"] = '{"inputs": ["1"]}'
    with pytest.raises(DataError, match=r"row 1: .*reward_model.ground_truth: expected JSON"):
        read_problems(_written(tmp_path, rows))
    rows = builtin_rows("math", 2)
    rows[0]["ability"] = "poetry"
    with pytest.raises(DataError, match=r"row 0: field 'ability' must be 'code', 'math' or 'qa', got 'poetry'"):
        read_problems(_written(tmp_path, rows))


def test_read_problems_names_missing_or_mistyped_column(tmp_path):
    table = pa.Table.from_pylist(builtin_rows("math", 1), schema=ROW_SCHEMA).drop_columns(["ability"])
    pq.write_table(table, tmp_path / "no_ability.parquet")
    with pytest.raises(DataError, match="no_ability.parquet: column 'ability' is missing"):
        read_problems(tmp_path / "no_ability.parquet")
    pq.write_table(pa.table({"data_source": ["x"], "prompt": ["text"]}), tmp_path / "flat.parquet")
    with pytest.raises(DataError, match="flat.parquet: column 'prompt' has type string"):
        read_problems(tmp_path / "flat.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="junk.parquet: not a readable parquet file"):
        read_problems(tmp_path / "junk.parquet")


def test_files_from_different_sources_concatenate(tmp_path):
    write_rows(builtin_rows("code", 2), tmp_path / "code.parquet")
    write_rows(builtin_rows("math", 2), tmp_path / "math.parquet")
    merged = pa.concat_tables([pq.read_table(tmp_path / "code.parquet"), pq.read_table(tmp_path / "math.parquet")])
    assert merged.schema.equals(ROW_SCHEMA) and merged.num_rows == 4


def test_builtin_code_rows():
    rows = builtin_rows("code", 8)
    assert rows == builtin_rows("code", 8)
    assert builtin_rows("code", 3) == rows[:3]
    assert [r["extra_info"]["index"] for r in rows] == list(range(8))
    assert len({normalised_text(r["extra_info"]["problem"]) for r in rows}) == 8
    first = rows[0]
    assert first["prompt"][0]["content"].endswith("Print a * 1 + b.")
    tests = json.loads(first["reward_model"]["ground_truth"])
    for stdin, stdout in zip(tests["inputs"], tests["outputs"]):
        a, b = map(int, stdin.split())
        assert int(stdout) == a * 1 + b
    call_based = rows[3]
    assert call_based["extra_info"]["fn_name"] == "count_multiples"
    tests = json.loads(call_based["reward_model"]["ground_truth"])
    for args, expected in zip(tests["inputs"], tests["outputs"]):
        [values] = json.loads(args)
        assert json.loads(expected) == sum(1 for v in values if v % 2 == 0)


def test_builtin_math_rows():
    rows = builtin_rows("math", 4)
    statements = [r["prompt"][0]["content"] for r in rows]
    assert statements[:2] == ["Compute 2 \\times 13 + 14.", "Compute 3 \\times (5 - 19)."]
    assert [r["reward_model"]["ground_truth"] for r in rows][:2] == ["40", "-42"]
    with pytest.raises(ValueError, match="domain must be 'code' or 'math', got 'chess'"):
        builtin_rows("chess", 1)


def test_cli_builtin_then_read(tmp_path, capsys):
    out = tmp_path / "code.parquet"
    assert main(["builtin", "--domain", "code", "--output", str(out), "--n", "6"]) == 0
    assert [p.uid for p in read_problems(out)] == [f"code-{i}" for i in range(6)]
    assert "wrote 6 problems" in capsys.readouterr().out


def test_cli_convert_prints_summary_and_reports_errors(tmp_path, capsys):
    source = _jsonl(tmp_path / "in.jsonl", AIME_LIKE)
    assert main(["aime25", "--input", str(source), "--output", str(tmp_path / "o.parquet")]) == 0
    assert "aime25: read 5, kept 2, dropped 3" in capsys.readouterr().out
    assert main(["apps", "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "x.parquet")]) == 2
    assert "missing: no such file or directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["aime25", "--input", str(source), "--output", "o.parquet", "--limit", "0"])


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA}")
def test_every_sample_converts_to_rows_of_one_schema(tmp_path):
    inputs = {
        "codecontests": SHARED_DATA / "codecontests" / "alphacodium_my_problem_example_1575A.json",
        "apps": SHARED_DATA / "apps" / "original_release_format" / "train",
        "livecodebench": SHARED_DATA / "livecodebench",
        "aime24": SHARED_DATA / "aime24",
        "aime25": SHARED_DATA / "aime25",
        "olympiadbench": SHARED_DATA / "olympiadbench",
        "polaris": SHARED_DATA / "polaris",
    }
    tables = []
    for name, path in inputs.items():
        convert(SOURCES[name], path, tmp_path / f"{name}.parquet")
        assert read_problems(tmp_path / f"{name}.parquet")
        tables.append(pq.read_table(tmp_path / f"{name}.parquet"))
    merged = pa.concat_tables(tables)
    assert merged.num_rows == 1 + 5 + 1 + 30 + 30 + 48 + 5  # olympiadbench: 2 unreadable ground truths dropped
    assert sorted(set(merged.column("data_source").to_pylist())) == sorted(inputs)
