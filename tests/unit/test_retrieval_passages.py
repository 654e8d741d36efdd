"""Passages: titles with and without quotes, the Search-R1 observation, and the JSON layout of the
retrieval API in both of Search-R1's forms (with scores, bare documents)."""

from __future__ import annotations

import math

import pytest

from verl_masopd.retrieval import Passage, render_observation
from verl_masopd.retrieval.api import BadResponse, parse_response, request_body, response_body


@pytest.mark.parametrize(
    "contents, title, text",
    [
        ('"Evan Morris"\nEvan Morris Evan L. Morris was', "Evan Morris", "Evan Morris Evan L. Morris was"),
        ("Absalon\nAbsalon was a Danish archbishop", "Absalon", "Absalon was a Danish archbishop"),
        ('"Copenhagen"\ncity of ""Havn"" (English: Harbour)', "Copenhagen", 'city of ""Havn"" (English: Harbour)'),
        ('"Two\nlines\nof text', '"Two', "lines\nof text"),
        ("no title line", "", "no title line"),
    ],
)
def test_title_and_text(contents, title, text):
    passage = Passage(id="7", contents=contents)
    assert (passage.title, passage.text) == (title, text)


def test_the_observation_is_one_doc_line_per_passage():
    passages = [Passage("0", '"Evan Morris"\nEvan Morris was a lobbyist.'), Passage("1", "Tappet\nA tappet is a cam.")]
    assert render_observation(passages) == (
        "Doc 1(Title: Evan Morris) Evan Morris was a lobbyist.\nDoc 2(Title: Tappet) A tappet is a cam.\n"
    )
    assert render_observation([]) == ""


def test_the_response_layouts_round_trip():
    results = [[Passage("0", "A\ntext a", 2.5), Passage("1", "B\ntext b", 1.0)], []]
    scored = response_body(results)
    assert scored == {
        "result": [
            [
                {"document": {"id": "0", "contents": "A\ntext a"}, "score": 2.5},
                {"document": {"id": "1", "contents": "B\ntext b"}, "score": 1.0},
            ],
            [],
        ]
    }
    assert parse_response(scored, 2) == results
    bare = response_body(results, return_scores=False)
    assert bare["result"][0] == [{"id": "0", "contents": "A\ntext a"}, {"id": "1", "contents": "B\ntext b"}]
    assert parse_response(bare, 2) == [[Passage("0", "A\ntext a"), Passage("1", "B\ntext b")], []]
    assert request_body(["q"], 3) == {"queries": ["q"], "topk": 3, "return_scores": True}


def test_a_search_r1_bm25_document_without_an_id_parses():
    body = {"result": [[{"document": {"title": "A", "text": "t", "contents": '"A"\nt'}, "score": 3}]]}
    assert parse_response(body, 1) == [[Passage("", '"A"\nt', 3.0)]]


@pytest.mark.parametrize(
    "body, reason",
    [
        ([], "no 'result' list"),
        ({"error": "boom"}, "no 'result' list"),
        ({"result": [[]]}, "1 result lists for 2 queries"),
        ({"result": [[], {"a": 1}]}, r"result\[1\] is not a list"),
        ({"result": [[], [{"document": {"id": "1"}, "score": 1.0}]]}, r"result\[1\]\[0\]: not a document"),
        ({"result": [[], ["text"]]}, r"result\[1\]\[0\]: not a document"),
        ({"result": [[], [{"document": {"contents": "x"}, "score": "high"}]]}, "score is not a finite number"),
        ({"result": [[], [{"document": {"contents": "x"}, "score": math.nan}]]}, "score is not a finite number"),
    ],
)
def test_a_body_out_of_layout_is_refused(body, reason):
    with pytest.raises(BadResponse, match=reason):
        parse_response(body, 2)
