"""Writing rows to parquet, and corpora to JSONL, atomically and byte-for-byte reproducibly."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.schema import ROW_SCHEMA


def write_rows(rows: list[dict], path: str | Path) -> None:
    """Write `rows` in `ROW_SCHEMA` to `path` via a temporary file renamed into place when complete.

    Same rows, same bytes: fixed schema, fixed compression, no pandas index or timestamps.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        pq.write_table(table, temporary, compression="zstd", row_group_size=1024)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_jsonl(records: Iterable[dict], path: str | Path) -> int:
    """Write `records` one JSON object a line (UTF-8) to `path`, via a temporary file renamed into
    place when complete, as `write_rows` does; returns how many. `records` is read as it goes, so
    a corpus never has to fit in memory, and an error while reading it leaves `path` untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count
