"""Reading source records from the files datasets are distributed as: jsonl, json, parquet."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.errors import DataError

RECORD_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Record:
    """One source record: its fields, its 0-based position in the input, and where it came from."""

    fields: dict
    position: int
    where: str


def read_records(paths: Iterable[Path]) -> Iterator[Record]:
    """Records of every file in order; a file in an unknown or broken format raises DataError."""
    position = 0
    for path in paths:
        for where, fields in _read_file(path):
            if not isinstance(fields, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(fields).__name__}")
            yield Record(fields, position, where)
            position += 1


def data_files(path: Path, split: str | None) -> list[Path]:
    """`path` itself, or the record files under it (recursively, sorted) whose name starts with `split`.

    Releases name their files by split (`test-00000-of-00001.parquet`, `train.jsonl`); with no split
    every record file is taken.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DataError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(RECORD_SUFFIXES))
    if split:
        files = [p for p in files if p.name.startswith(split)]
    if not files:
        wanted = f"named {split}*" if split else "at all"
        raise DataError(f"{path}: no {'/'.join(RECORD_SUFFIXES)} files {wanted}")
    return files


def _read_file(path: Path) -> Iterator[tuple[str, object]]:
    readers = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}
    if path.suffix not in readers:
        raise DataError(f"{path}: unsupported file type (expected {', '.join(RECORD_SUFFIXES)})")
    try:
        yield from readers[path.suffix](path)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} cannot be decoded)") from None


def _read_jsonl(path: Path) -> Iterator[tuple[str, object]]:
    with _open_text(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except ValueError as e:
                raise DataError(f"{path}:{number}: not a JSON line ({e})") from None


def _read_json(path: Path) -> Iterator[tuple[str, object]]:
    with _open_text(path) as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise DataError(f"{path}: not a JSON file ({e})") from None
    if isinstance(data, dict):
        yield str(path), data
    elif isinstance(data, list):
        for number, item in enumerate(data):
            yield f"{path}[{number}]", item
    else:
        raise DataError(f"{path}: expected a JSON object or a list of objects, got {type(data).__name__}")


def _read_parquet(path: Path) -> Iterator[tuple[str, object]]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    number = 0
    for batch in parquet.iter_batches(batch_size=256):
        for fields in batch.to_pylist():
            yield f"{path}: row {number}", fields
            number += 1


def _open_text(path: Path):
    try:
        return open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror})") from None
