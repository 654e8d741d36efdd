"""The conversion run shared by every dataset: read, convert, de-duplicate, index, write, summarise."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from data_prep.dedup import SeenTexts
from data_prep.errors import DataError, Dropped
from data_prep.source import Source
from data_prep.summary import Summary
from data_prep.writer import write_rows


def convert(
    source: Source, input_path: str | Path, output_path: str | Path, split: str | None = None, limit: int | None = None
) -> Summary:
    """Convert `input_path` to `output_path`, keeping at most `limit` rows; returns the summary.

    Rows keep the input order; `extra_info.index` is the row's position in the output. Nothing is
    written when no row is kept.
    """
    rows, summary = collect(source, input_path, split, limit)
    write_rows(rows, output_path)
    return summary


def collect(
    source: Source, input_path: str | Path, split: str | None = None, limit: int | None = None
) -> tuple[list[dict], Summary]:
    """The rows `convert` would write, and its summary; DataError when no row is kept."""
    split = split or source.default_split
    summary = Summary(source.name)
    seen = SeenTexts()
    rows = []
    records = source.records(Path(input_path), split)
    # closed on the way out, so an error is printed on a line of its own
    with tqdm(records, desc=source.name, unit="row", leave=False) as progress:
        for record in progress:
            if limit is not None and len(rows) >= limit:
                break
            summary.read += 1
            try:
                row = source.to_row(record, split)
            except Dropped as drop:
                summary.drop(drop.reason, record.where)
                continue
            if not seen.add(source.duplicate_key(row)):
                summary.drop(source.duplicate_reason, record.where)
                continue
            row["extra_info"]["index"] = len(rows)
            rows.append(row)
    summary.kept = len(rows)
    if not rows:
        raise DataError(f"{input_path}: no {source.name} row kept, nothing written\n{summary.format()}")
    return rows, summary
