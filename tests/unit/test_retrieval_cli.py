"""`python -m verl_masopd.retrieval`: index, search (JSON in the server's response layout) and
serve; bad input is one line naming the culprit, exit status 2."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from verl_masopd.retrieval import BM25Index, RetrievalServer
from verl_masopd.retrieval.__main__ import main
from verl_masopd.retrieval.api import request_body


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_index_builds_once_then_reuses(retrieval_corpus, tmp_path, capsys):
    out = str(tmp_path / "index")
    assert main(["index", "--corpus", str(retrieval_corpus), "--out", out]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["index"], first["passages"], first["built"]) == (out, 6, True)
    assert main(["index", "--corpus", str(retrieval_corpus), "--out", out]) == 0
    assert json.loads(capsys.readouterr().out)["built"] is False


def test_search_prints_the_servers_response(retrieval_index, retrieval_queries, capsys):
    queries = [query for query, _ in retrieval_queries] + ["xylophone zeppelin"]
    assert main(["search", "--index", str(retrieval_index), "--topk", "2", *queries]) == 0
    printed = json.loads(capsys.readouterr().out)
    with RetrievalServer(BM25Index(retrieval_index)) as server:
        request = urllib.request.Request(
            server.url + "/retrieve",
            data=json.dumps(request_body(queries, 2)).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            served = json.loads(response.read())
    assert printed == served
    assert [hits[0]["document"]["id"] for hits in printed["result"][:-1]] == [a for _, a in retrieval_queries]
    assert printed["result"][-1] == []


def test_a_bad_corpus_line_stops_with_file_and_line(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "A\\ntext"}\n{"id": "1"}\n')
    assert main(["index", "--corpus", str(corpus), "--out", str(tmp_path / "index")]) == 2
    assert _one_line(capsys.readouterr().err) == f'error: {corpus}:2: no "contents" string'
    assert not (tmp_path / "index").exists()


def test_a_folder_that_is_not_an_index_stops_search_and_serve(tmp_path, capsys):
    assert main(["search", "--index", str(tmp_path), "reef"]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"error: {tmp_path}: not a retrieval index")
    assert main(["serve", "--index", str(tmp_path), "--port", "0"]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"error: {tmp_path}: not a retrieval index")


def test_an_unusable_output_folder_or_port_is_named(retrieval_corpus, retrieval_index, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "index"
    assert main(["index", "--corpus", str(retrieval_corpus), "--out", str(out)]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"error: --out {out}:")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--index", str(retrieval_index), "--port", str(port)]) == 2
    message = _one_line(capsys.readouterr().err)
    assert message.startswith(f"error: --host 127.0.0.1 --port {port}: Address already in use")


@pytest.mark.parametrize(
    "argv, option",
    [
        (["search", "--index", "x", "--topk", "0", "q"], "--topk"),
        (["serve", "--index", "x", "--port", "70000"], "--port"),
        (["index", "--corpus", "c.jsonl"], "--out"),
    ],
)
def test_bad_arguments_are_one_line(argv, option, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert option in _one_line(capsys.readouterr().err)
