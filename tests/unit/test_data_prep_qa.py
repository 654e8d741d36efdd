"""The QA converters, the NQ + HotpotQA training mix and the passage corpora, on the real release
samples in ../shared/data (skipped where absent) and on rows built in the documented layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep.__main__ import main
from data_prep.builtin import builtin_rows
from data_prep.convert import convert
from data_prep.corpus import corpus_from_questions, normalise_wiki18, parse_contents
from data_prep.errors import DataError, Dropped
from data_prep.multihop_qa import paragraphs
from data_prep.qa_mix import train_mix
from data_prep.records import Record
from data_prep.schema import ROW_SCHEMA, read_problems, read_rows
from data_prep.sources import SOURCES
from data_prep.writer import write_rows
from verl_masopd.workflows.problem import Problem

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_samples = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"dataset samples not found at {SHARED_DATA} (shared/ beside the checkout)"
)


def _convert(name: str, source_path: Path, tmp_path: Path, split: str | None = None):
    out = tmp_path / f"{name}.parquet"
    summary = convert(SOURCES[name], source_path, out, split)
    return summary, read_problems(out), read_rows(out)


def _to_row(name: str, fields: dict, split: str = "test") -> dict:
    return SOURCES[name].to_row(Record(fields, 3, "built row"), split)


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --- the seven benchmarks on their real samples -------------------------------------------


@needs_samples
def test_nq_open_release_layout(tmp_path):
    summary, problems, rows = _convert("nq", SHARED_DATA / "nq" / "NQ-open.dev.first200.jsonl", tmp_path)
    assert (summary.read, summary.kept) == (200, 200)
    first = problems[0]
    assert first.statement == "when was the last time anyone was on the moon"
    assert first.answers == ("14 December 1972 UTC", "December 1972")
    assert (first.uid, first.domain, first.data_source) == ("0", "qa", "nq")
    assert problems[2].answers == ("one", "one season")
    assert rows[0]["ability"] == "qa" and rows[0]["extra_info"]["split"] == "test"


@needs_samples
def test_nq_flashrag_layout_and_search_r1_parquet_agree(tmp_path):
    summary, flashrag, _ = _convert("nq", SHARED_DATA / "nq" / "flashrag_nq_test.jsonl", tmp_path)
    assert summary.kept == 17
    assert flashrag[0].uid == "test_0" and flashrag[0].answers == ("Wilhelm Conrad Röntgen",)
    assert flashrag[2].answers == ("Olivia", "MFSK")
    out = tmp_path / "searchr1.parquet"
    assert convert(SOURCES["nq"], SHARED_DATA / "searchr1" / "nq_search_test.parquet", out).kept == 100
    search_r1 = read_problems(out)
    assert search_r1[0].statement == "who got the first nobel prize in physics?"  # Search-R1 appended the "?"
    for a, b in zip(flashrag, search_r1):
        assert (a.uid, a.answers, a.statement + "?") == (b.uid, b.answers, b.statement)


@needs_samples
def test_triviaqa_release_object_with_data_list(tmp_path):
    summary, [problem], rows = _convert("triviaqa", SHARED_DATA / "triviaqa" / "triviaqa_sample.json", tmp_path)
    assert summary.kept == 1
    assert problem.uid == "tc_33"
    assert problem.statement == "Which Lloyd Webber musical premiered in the US on 10th December 1993?"
    assert problem.answers == (
        "Sunset Boulevard",
        "Sunset Blvd",
        "West Sunset Boulevard",
        "Sunset Bulevard",
        "Sunset Blvd.",
    )
    assert json.loads(rows[0]["extra_info"]["metadata"]) == {
        "source": "http://www.triviacountry.com/",
        "type": "WikipediaEntity",
    }


@needs_samples
def test_popqa_possible_answers_json_string_is_decoded(tmp_path):
    sample = SHARED_DATA / "popqa" / "popqa.first50.json"
    summary, problems, rows = _convert("popqa", sample, tmp_path)
    assert (summary.read, summary.kept) == (50, 50)
    raw = json.loads(sample.read_text())
    assert isinstance(raw[0]["possible_answers"], str)
    first = problems[0]
    assert first.statement == "What is George Rankin's occupation?"
    assert first.answers == ("politician", "political leader", "political figure", "polit.", "pol")
    assert [p.answers for p in problems] == [tuple(json.loads(r["possible_answers"])) for r in raw]
    metadata = json.loads(rows[0]["extra_info"]["metadata"])
    assert (metadata["prop"], metadata["s_pop"], metadata["obj"]) == ("occupation", 142, "politician")
    assert "paragraphs" not in rows[0]["extra_info"]["metadata"]


@needs_samples
def test_hotpotqa_release_and_hf_layouts(tmp_path):
    summary, problems, rows = _convert(
        "hotpotqa", SHARED_DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json", tmp_path
    )
    assert (summary.kept, problems[0].uid) == (30, "5a8b57f25542995d1e6f1371")
    assert problems[0].statement == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert problems[0].answers == ("yes",)
    metadata = [json.loads(r["extra_info"]["metadata"]) for r in rows]
    assert [m["type"] for m in metadata].count("comparison") == 8
    assert metadata[0]["supporting_facts"] == [["Scott Derrickson", 0], ["Ed Wood", 0]]
    assert rows[0]["extra_info"]["split"] == "dev"
    summary, hf, hf_rows = _convert("hotpotqa", SHARED_DATA / "hotpotqa" / "hf_layout_rpt_dev.first20.jsonl", tmp_path)
    assert summary.kept == 20
    assert (hf[0].uid, hf[0].answers) == ("5a8ce55f554299441c6b9f62", ("Tulsa",))
    supporting = json.loads(hf_rows[0]["extra_info"]["metadata"])["supporting_facts"]
    assert supporting == [["Tinted Windows (album)", 0], ["Tinted Windows (band)", 3]]


@needs_samples
def test_2wikimultihopqa_release_layout(tmp_path):
    summary, problems, rows = _convert("2wikimultihopqa", SHARED_DATA / "2wikimultihopqa" / "qa_sub.json", tmp_path)
    assert summary.kept == 2
    assert [(p.uid, p.statement, p.answers) for p in problems] == [
        ("83bf3b5a0bd911eba7f7acde48001122", "When did Lothair Ii's mother die?", ("20 March 851",)),
        (
            "a80d84e7096d11ebbdb0ac1f6bf848b6",
            "Which film was released first, Aas Ka Panchhi or Phoolwari?",
            ("Phoolwari",),
        ),
    ]
    metadata = json.loads(rows[0]["extra_info"]["metadata"])
    assert metadata["type"] == "compositional"
    assert metadata["evidences"][1] == ["Ermengarde of Tours", "date of death", "20 March 851"]


@needs_samples
def test_musique_answer_and_aliases(tmp_path):
    summary, problems, rows = _convert("musique", SHARED_DATA / "musique" / "musique_qa_100.first20.json", tmp_path)
    assert summary.kept == 20
    first = problems[0]
    assert (first.uid, first.statement) == ("2hop__82713_84616", "What did the actress in My Fair Lady win a Tony for?")
    assert first.answers == (
        "for Best Performance by a Leading Actress in a Play in Ondine",
        "leading role",
        "star",
        "leading actress",
        "lead",
    )
    assert sum(len(p.answers) > 1 for p in problems) == 4  # 16 of 20 have no aliases
    decomposition = json.loads(rows[0]["extra_info"]["metadata"])["decomposition"]
    assert decomposition[0] == {
        "question": "who was the actress in my fair lady",
        "answer": "Audrey Hepburn",
        "paragraph_support_idx": 1,
    }


@needs_samples
def test_bamboogle_three_layouts_and_the_trailing_newline(tmp_path):
    folder = SHARED_DATA / "bamboogle"
    by_layout = {}
    for name in ("bamboogle.csv", "bamboogle.json", "r1searcher_bamboogle.jsonl"):
        out = tmp_path / f"{name}.parquet"
        assert convert(SOURCES["bamboogle"], folder / name, out).kept == 125
        by_layout[name] = read_problems(out)
    assert (tmp_path / "bamboogle.json.parquet").read_bytes() == (
        tmp_path / "r1searcher_bamboogle.jsonl.parquet"
    ).read_bytes()
    sheet = by_layout["bamboogle.csv"]
    assert sheet[0].statement == "Who was president of the United States in the year that Citibank was founded?"
    assert (sheet[0].uid, sheet[0].answers) == ("0", ("james madison",))
    monarch = "Who is the predecessor of the longest-reigning British monarch?"
    for problems in by_layout.values():
        [george] = [p for p in problems if p.statement == monarch]
        assert george.answers == ("George VI",)  # "George VI\r\n" in the sheet, "George VI\n" in the JSON
    mother = "Who is the mother of the father of George Washington?"
    assert [p.answers for p in sheet if p.statement == mother] == [("Mildred Warner", "Mildred Gale")]
    json_rows = by_layout["bamboogle.json"]
    assert [p.answers for p in json_rows if p.statement == mother] == [("Mildred Warner",)]
    differ = [a.uid for a, b in zip(sheet, json_rows) if (a.statement, a.answers) != (b.statement, b.answers)]
    assert differ == [p.uid for p in sheet if p.statement == mother]


@needs_samples
def test_every_qa_sample_concatenates_with_code_and_math(tmp_path):
    inputs = {
        "nq": SHARED_DATA / "nq" / "flashrag_nq_test.jsonl",
        "triviaqa": SHARED_DATA / "triviaqa" / "triviaqa_sample.json",
        "popqa": SHARED_DATA / "popqa" / "popqa.first50.json",
        "hotpotqa": SHARED_DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json",
        "2wikimultihopqa": SHARED_DATA / "2wikimultihopqa" / "qa_sub.json",
        "musique": SHARED_DATA / "musique" / "musique_qa_100.first20.json",
        "bamboogle": SHARED_DATA / "bamboogle" / "bamboogle.json",
    }
    tables = []
    for name, path in inputs.items():
        convert(SOURCES[name], path, tmp_path / f"{name}.parquet")
        tables.append(pq.read_table(tmp_path / f"{name}.parquet"))
    write_rows(builtin_rows("code", 2) + builtin_rows("math", 2), tmp_path / "builtin.parquet")
    merged = pa.concat_tables([*tables, pq.read_table(tmp_path / "builtin.parquet")])
    assert merged.schema.equals(ROW_SCHEMA)
    assert merged.num_rows == 17 + 1 + 50 + 30 + 2 + 20 + 125 + 4
    pq.write_table(merged, tmp_path / "merged.parquet")
    domains = [p.domain for p in read_problems(tmp_path / "merged.parquet")]
    assert domains.count("qa") == 245 and domains[-4:] == ["code", "code", "math", "math"]


# --- rows built in the documented layouts -----------------------------------------------


def test_flashrag_rows_keep_metadata_without_paragraphs():
    row = _to_row(
        "hotpotqa",
        {
            "id": "5a8b",
            "question": " Who? ",
            "golden_answers": ["yes", " yes ", ""],
            "metadata": {"type": "comparison", "context": {"title": ["T"], "sentences": [["S."]]}},
        },
        "dev",
    )
    assert row["extra_info"]["problem"] == "Who?" and row["extra_info"]["id"] == "5a8b"
    assert json.loads(row["reward_model"]["ground_truth"]) == ["yes"]
    assert json.loads(row["extra_info"]["metadata"]) == {"type": "comparison"}


def test_triviaqa_hf_rows_and_free_form_answers():
    row = _to_row(
        "triviaqa",
        {"question": "Q?", "question_id": "qz_1", "answer": {"value": "Paris", "aliases": ["Paris", "Paree"]}},
    )
    assert json.loads(row["reward_model"]["ground_truth"]) == ["Paris", "Paree"]
    free_form = _to_row(
        "triviaqa", {"Question": "Q2?", "QuestionId": "x", "Answer": {"Value": "42", "Type": "Numerical"}}
    )
    assert json.loads(free_form["reward_model"]["ground_truth"]) == ["42"]


@pytest.mark.parametrize(
    "name, fields, reason",
    [
        ("musique", {"id": "2hop__1", "question": "Q?", "answer": "A", "answerable": False}, "unanswerable"),
        ("popqa", {"id": 1, "question": "Q?", "possible_answers": "[broken"}, "'possible_answers' is not valid JSON"),
        ("nq", {"question": "  ", "answer": ["a"]}, "empty question"),
        ("nq", {"question": "q", "answer": [" ", ""]}, "no golden answer"),
        ("nq", {"question": "q", "answer": [1990]}, "golden answers are not a list of strings"),
        ("nq", {"id": "t", "question": "q", "golden_answers": ["a"], "data_source": "hotpotqa"}, "another dataset"),
    ],
)
def test_bad_rows_are_dropped_with_reason(name, fields, reason):
    with pytest.raises(Dropped, match=reason):
        _to_row(name, fields)


def test_same_question_with_other_answers_is_kept_exact_repeat_dropped(tmp_path):
    rows = [
        {"id": 1, "question": "What is John Smith's occupation?", "possible_answers": '["politician"]'},
        {"id": 2, "question": "What is John Smith's occupation?", "possible_answers": '["footballer"]'},
        {"id": 3, "question": "what is john smith's  occupation?", "possible_answers": '["politician"]'},
    ]
    summary = convert(SOURCES["popqa"], _jsonl(tmp_path / "popqa.jsonl", rows), tmp_path / "out.parquet")
    assert (summary.kept, dict(summary.dropped)) == (2, {"duplicate question and golden answers": 1})
    assert [p.uid for p in read_problems(tmp_path / "out.parquet")] == ["1", "2"]


def test_record_in_no_known_layout_stops_naming_file_and_row(tmp_path, capsys):
    source = _jsonl(tmp_path / "mixed.jsonl", [{"question": "q", "answer": ["a"]}, {"problem": "2+2", "answer": "4"}])
    with pytest.raises(DataError, match=rf"{source}:2: not a nq record: expected NQ-open's"):
        convert(SOURCES["nq"], source, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()
    assert main(["hotpotqa", "--input", str(source), "--output", str(tmp_path / "o.parquet")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith(f"error: {source}:1: not a hotpotqa record") and error.endswith(
        "(fields: answer, question)"
    )


def test_bamboogle_sheet_with_too_few_columns(tmp_path):
    sheet = tmp_path / "bamboogle.csv"
    sheet.write_text("Who?,,,,Someone,,\r\nWhat?,x\r\n")
    with pytest.raises(DataError, match=rf"{sheet}:2: expected the sheet's columns"):
        convert(SOURCES["bamboogle"], sheet, tmp_path / "out.parquet")


def test_qa_problem_from_row_and_bad_ground_truth(tmp_path):
    row = _to_row("nq", {"question": "who?", "answer": ["A", "B"]})
    problem = Problem.from_row(row)
    assert (problem.domain, problem.answers, problem.answer, problem.uid) == ("qa", ("A", "B"), None, "3")
    for truth, message in [("A", "expected a JSON list"), ("[]", "non-empty JSON list"), ('["a", 1]', "non-blank")]:
        row["reward_model"]["ground_truth"] = truth
        with pytest.raises(ValueError, match=message):
            Problem.from_row(row)
    write_rows([row], tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"row 0: row 3: reward_model.ground_truth: every golden answer"):
        read_problems(tmp_path / "bad.parquet")


def test_code_and_math_rows_read_as_before():
    code, math = builtin_rows("code", 1)[0], builtin_rows("math", 1)[0]
    assert Problem.from_row(code).tests and Problem.from_row(code).answers == ()
    parsed = Problem.from_row(math)
    assert (parsed.domain, parsed.answer, parsed.answers) == ("math", "40", ())


# --- the training mix ---------------------------------------------------------------------


def _released_key(question: str) -> str:
    return question.lower().rstrip("?").strip()


@needs_samples
def test_train_mix_removes_test_questions(tmp_path):
    nq = SHARED_DATA / "nq" / "NQ-open.dev.first200.jsonl"
    hotpotqa = SHARED_DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json"
    flashrag_test = tmp_path / "nq_test.parquet"
    convert(SOURCES["nq"], SHARED_DATA / "nq" / "flashrag_nq_test.jsonl", flashrag_test)
    search_r1_test = SHARED_DATA / "searchr1" / "nq_search_test.parquet"
    summary = train_mix(nq, hotpotqa, [flashrag_test, search_r1_test], tmp_path / "mix.parquet")
    test_keys = {_released_key(q) for q in pq.read_table(search_r1_test).column("question").to_pylist()}
    nq_questions = [json.loads(line)["question"] for line in nq.read_text().splitlines()]
    overlap = sum(_released_key(q) in test_keys for q in nq_questions)
    assert overlap == 8
    assert dict(summary.removed) == {"nq": 8}
    assert summary.test_questions == 100  # the 17 FlashRAG rows are Search-R1's first 17
    assert summary.written == 200 - 8 + 30
    assert "removed 8 training rows whose question is one of the 100 test questions (nq: 8, hotpotqa: 0)" in (
        summary.format()
    )
    problems = read_problems(tmp_path / "mix.parquet")
    assert not {_released_key(p.statement) for p in problems} & test_keys
    assert problems[0].uid == "nq:0" and problems[-1].uid.startswith("hotpotqa:")
    assert len({p.uid for p in problems}) == len(problems)
    assert {p.data_source for p in problems} == {"nq", "hotpotqa"}
    assert {r["extra_info"]["split"] for r in read_rows(tmp_path / "mix.parquet")} == {"train"}


def test_train_mix_on_built_rows_and_cli(tmp_path, capsys):
    nq = _jsonl(tmp_path / "nq.jsonl", [{"question": "who wrote hamlet", "answer": ["Shakespeare"]}] * 2)
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(
        json.dumps(
            [
                {"_id": "a1", "question": "Which is older, X or Y?", "answer": "X"},
                {"_id": "a2", "question": "Who directed “Two Mules for Sister Sara”?", "answer": "Don Siegel"},
            ]
        )
    )
    test = tmp_path / "test.parquet"
    pq.write_table(pa.table({"question": ['Who directed "2 Mules for Sister Sara"']}), test)
    out = tmp_path / "mix.parquet"
    assert (
        main(["qa_train_mix", "--nq", str(nq), "--hotpotqa", str(hotpot), "--exclude", str(test), "--output", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "nq: read 2, kept 1, dropped 1" in printed and "(nq: 0, hotpotqa: 1)" in printed
    assert [p.uid for p in read_problems(out)] == ["nq:0", "hotpotqa:a1"]
    assert (
        main(["qa_train_mix", "--nq", str(nq), "--hotpotqa", str(hotpot), "--exclude", str(nq), "--output", str(out)])
        == 2
    )
    assert "nq.jsonl: not a readable parquet file" in capsys.readouterr().err


# --- passage corpora ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "contents, title, text",
    [
        ('"Evan Morris"\nEvan Morris Evan L. Morris', "Evan Morris", "Evan Morris Evan L. Morris"),
        ("Absalon\ndragged forth and burnt.", "Absalon", "dragged forth and burnt."),
        ('"""Heroes"" (song)"\ncity of ""Havn""', '""Heroes"" (song)', 'city of ""Havn""'),
        ('"\nx', '"', "x"),
    ],
)
def test_parse_contents_quoted_and_bare_titles(contents, title, text):
    assert parse_contents(contents) == (title, text)


@needs_samples
def test_wiki18_sample_normalised(tmp_path):
    out = tmp_path / "corpus.jsonl"
    summary = normalise_wiki18(SHARED_DATA / "wiki18_corpus" / "sample_data.jsonl", out)
    assert (summary.read, summary.written, summary.bare_titles) == (1000, 1000, 121)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    raw = [json.loads(line) for line in (SHARED_DATA / "wiki18_corpus" / "sample_data.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in raw]
    assert rows[0]["title"] == "Evan Morris" and rows[0]["text"].startswith(
        "Evan Morris Evan L. Morris (January 26, 1977 –"
    )
    assert rows[0]["contents"] == raw[0]["contents"]
    bare = rows[29]
    assert raw[29]["contents"].startswith("Absalon\n")
    assert (bare["title"], bare["contents"]) == ("Absalon", '"Absalon"\n' + bare["text"])
    assert all(r["contents"] == f'"{r["title"]}"\n{r["text"]}' for r in rows)


def test_wiki18_bad_rows_stop_naming_the_line(tmp_path):
    source = _jsonl(
        tmp_path / "wiki.jsonl", [{"id": "0", "contents": '"T"\ntext'}, {"id": "1", "contents": "no title"}]
    )
    out = tmp_path / "corpus.jsonl"
    with pytest.raises(DataError, match=rf"{source}:2: field 'contents': no newline"):
        normalise_wiki18(source, out)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["wiki.jsonl"]
    _jsonl(source, [{"id": "0", "text": "x"}])
    assert main(["corpus", "--wiki18", str(source), "--output", str(out)]) == 2


@needs_samples
def test_corpus_from_the_questions_paragraphs(tmp_path, capsys):
    inputs = [
        SHARED_DATA / "hotpotqa" / "hotpot_dev_distractor_v1.first30.json",
        SHARED_DATA / "hotpotqa" / "hf_layout_rpt_dev.first20.jsonl",
        SHARED_DATA / "2wikimultihopqa" / "qa_sub.json",
        SHARED_DATA / "musique" / "musique_qa_100.first20.json",
    ]
    out = tmp_path / "small.jsonl"
    assert main(["corpus", "--questions", *map(str, inputs), "--output", str(out)]) == 0
    assert "corpus: 72 questions, 912 paragraphs read, 902 distinct written (10 repeats" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [str(i) for i in range(902)]
    assert len({(r["title"], r["text"]) for r in rows}) == 902
    by_title = {r["title"]: r for r in rows}
    hotpot = by_title["Scott Derrickson"]["text"]
    assert hotpot.startswith(
        "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer. He"
    )
    wiki2 = by_title["Teutberga"]["text"]
    assert "by marriage to Lothair II. She was a daughter" in wiki2  # 2Wiki's sentences have no leading space
    assert by_title["Keala Settle"]["text"].startswith("Keala Joan Settle (born November 5, 1975)")
    assert by_title["Keala Settle"]["contents"] == '"Keala Settle"\n' + by_title["Keala Settle"]["text"]


def test_paragraphs_of_each_layout():
    pairs = {"context": [["A", ["One.", " Two."]], ["B", ["Three.", "Four."]]]}
    assert paragraphs(pairs) == [("A", "One. Two."), ("B", "Three. Four.")]
    columns = {"metadata": {"context": {"title": ["A"], "sentences": [["One.", " Two."]]}}}
    assert paragraphs(columns) == [("A", "One. Two.")]
    musique = {"paragraphs": [{"idx": 0, "title": "M", "paragraph_text": "Text.", "is_supporting": True}]}
    assert paragraphs(musique) == [("M", "Text.")]
    assert paragraphs({"question": "q", "answer": ["a"]}) is None


def test_corpus_from_a_file_without_paragraphs_stops(tmp_path):
    source = _jsonl(tmp_path / "nq.jsonl", [{"question": "q", "answer": ["a"]}])
    with pytest.raises(DataError, match=rf"{source}:1: no paragraphs"):
        corpus_from_questions([source], tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
