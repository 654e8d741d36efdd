"""The passages of an index on disk: `passages.jsonl` (one `{"id", "contents"}` per line, in
index order) and `passage_offsets.npy` (the byte offset of each line and the file's end), both
memory-mapped when read. Reads slice the map and never move a file position, so any number of
threads may read at once."""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from verl_masopd.retrieval.passages import Passage

PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "passage_offsets.npy"


def write_passages(directory: Path, passages: Iterable[tuple[str, str]]) -> Iterator[str]:
    """Write (id, contents) pairs into `directory` while yielding each contents in turn (to be
    tokenized as they stream by); the offsets are written once the passages are exhausted."""
    offsets = [0]
    with open(directory / PASSAGES_FILE, "wb") as handle:
        for passage_id, contents in passages:
            line = json.dumps({"id": passage_id, "contents": contents}, ensure_ascii=False).encode("utf-8") + b"\n"
            handle.write(line)
            offsets.append(offsets[-1] + len(line))
            yield contents
    np.save(directory / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))


class PassageStore:
    """Read-only access to the passages written by `write_passages`."""

    def __init__(self, directory: Path):
        self._offsets = np.load(directory / OFFSETS_FILE, mmap_mode="r")
        with open(directory / PASSAGES_FILE, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def get(self, index: int, score: float | None = None) -> Passage:
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        row = json.loads(self._map[start:end])
        return Passage(id=row["id"], contents=row["contents"], score=score)
