"""Reading a passage corpus: JSONL in the wiki-18 layout, one `{"id": ..., "contents": ...}` per
line (other fields are ignored, blank lines skipped), and the digest that keys its index."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

DIGEST_CHUNK_BYTES = 1 << 20


class CorpusError(ValueError):
    """A corpus that cannot be read; the message names the file and, for a bad row, the line."""


def corpus_digest(path: str | Path) -> str:
    """The SHA-256 of the corpus file's bytes, hex."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(DIGEST_CHUNK_BYTES):
                digest.update(chunk)
    except OSError as error:
        raise CorpusError(f"{path}: cannot read the corpus: {error.strerror or error}") from None
    return digest.hexdigest()


def _row(raw: bytes, where: str) -> tuple[str, str]:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorpusError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise CorpusError(f"{where}: not JSON ({error.msg})") from None
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: not a JSON object")
    if not isinstance(row.get("contents"), str):
        raise CorpusError(f'{where}: no "contents" string')
    if isinstance(row.get("id"), bool) or not isinstance(row.get("id"), (str, int)):
        raise CorpusError(f'{where}: no "id" (a string or an integer)')
    return str(row["id"]), row["contents"]


def read_corpus(path: str | Path) -> Iterator[tuple[str, str]]:
    """(id, contents) of every passage, in file order; raises CorpusError "FILE:LINE: reason" at
    the first bad line, and "FILE: ..." for a file that cannot be read or holds no passage."""
    passages = 0
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                if raw.strip():
                    passages += 1
                    yield _row(raw, f"{path}:{number}")
    except OSError as error:
        raise CorpusError(f"{path}: cannot read the corpus: {error.strerror or error}") from None
    if passages == 0:
        raise CorpusError(f"{path}: no passages")
