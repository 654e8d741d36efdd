"""The GSM8K problems of the real pair's experiments: one conversion of the release's training file,
cut by position into three parts that never overlap.

    positions [0, 5973)      train        the comparison's training problems
    positions [5973, 6473)   validation   the choice of learning rate and LoRA rank
    positions [6473, 7473)   held-out     calibration and the comparison's evaluation (the last
                                          1,000 rows: never trained on, never used to choose settings)

The conversion is the project's own (`python -m data_prep gsm8k`: the final answer after `####`,
the worked solution as the reference); a row's uid is its position in the release file, so a
part's problems can be checked against the file. Each part is written once under DIR and reused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

ROWS = 7473  # openai/grade-school-math train.jsonl
PARTS = {"train": (0, 5973), "validation": (5973, 6473), "heldout": (6473, 7473)}
ROOT = Path(__file__).resolve().parents[1]


def gsm8k_parts(release: Path, folder: Path) -> dict[str, Path]:
    """{part: parquet file} of PARTS, converted from the release's `train.jsonl` once."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / f"gsm8k_{name}.parquet" for name in PARTS}
    if all(path.is_file() for path in files.values()):
        return files
    whole = folder / "gsm8k_all.parquet"
    command = [sys.executable, "-m", "data_prep", "gsm8k", "--input", str(release), "--output", str(whole)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"real_pair_data: data_prep gsm8k failed: {done.stderr.strip().splitlines()[-1]}")
    table = pq.read_table(whole)
    if table.num_rows != ROWS:
        raise SystemExit(f"real_pair_data: {release} converted to {table.num_rows} rows, expected {ROWS}")
    for name, (start, stop) in PARTS.items():
        pq.write_table(table.slice(start, stop - start), files[name])
    whole.unlink()
    return files
