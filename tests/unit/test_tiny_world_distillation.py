"""The distillation options' summary (benchmarks/tiny_world_distillation.py) from hand-made cells:
each option minus its method's default and each row minus OPD, paired by seed."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import tiny_world_distillation as distillation  # noqa: E402


def cell(method, option, seed, accuracy):
    return {"domain": "math", "method": method, "setting": option, "seed": seed, "test_accuracy": accuracy}


def test_options_against_the_default_and_against_opd_paired_by_seed():
    cells = [
        *(cell("masopd", "k1", s, v) for s, v in enumerate([0.80, 0.90, 0.85])),
        *(cell("masopd", "k3", s, v) for s, v in enumerate([0.78, 0.86, 0.84])),
        *(cell("opd", "k1", s, v) for s, v in enumerate([0.79, 0.85, 0.82])),
        cell("mas-grpo", "none", 0, 0.5),  # one seed: no difference
    ]
    summary = distillation.summarise(cells, ["math"], [0, 1, 2])
    # k3 − k1: −0.02, −0.04, −0.01 → mean −0.07/3; se = sd/√3
    d = summary["differences"]["masopd k3 math"]
    assert d["mean"] == pytest.approx(-0.07 / 3) and d["n"] == 3
    assert d["se"] == pytest.approx(0.0152753 / 3**0.5, abs=1e-6)
    assert d["high"] - d["mean"] == pytest.approx(4.302653 * d["se"], abs=1e-6)  # t_{0.975, 2}
    # masopd k1 − opd: 0.01, 0.05, 0.03 → 0.03, sd 0.02
    o = summary["against_opd"]["masopd k1 math"]
    assert o["mean"] == pytest.approx(0.03) and o["se"] == pytest.approx(0.02 / 3**0.5)
    assert "opd k1 math" not in summary["against_opd"] and "mas-grpo none math" not in summary["against_opd"]
    table = distillation.summary_markdown(summary)
    assert "| masopd | k1 | 85.0 ± 5.0 (n=3) | — | +3.0 ± 1.2 [-2.0, +8.0] |" in table
    assert "| mas-grpo | none | 50.0 (n=1) | — | — |" in table
