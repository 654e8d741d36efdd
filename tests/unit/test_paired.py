"""The seed-paired difference against hand computations: mean of the per-seed differences, its
standard error sd/√n and the t-interval with the tabled Student t quantiles."""

import math

import pytest

from verl_masopd.report.paired import paired_difference


def test_three_seeds_by_hand():
    # d = 1, 2, 3: mean 2, sd 1, se 1/√3; t_{0.975, 2} = 4.3027 (the t table)
    d = paired_difference({1: 3.0, 2: 5.0, 3: 7.0}, {1: 2.0, 2: 3.0, 3: 4.0})
    assert d.mean == pytest.approx(2.0) and d.n == 3 and d.seeds == (1, 2, 3)
    assert d.se == pytest.approx(1 / math.sqrt(3))
    assert d.low == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-5)
    assert d.high == pytest.approx(2 + 4.302653 / math.sqrt(3), abs=1e-5)
    assert d.as_dict()["seeds"] == [1, 2, 3] and d.level == 0.95


def test_only_common_seeds_are_paired_and_the_order_of_keys_does_not_matter():
    # seed 9 only on one side is left out; d = 0.02, 0.05, 0.01 over seeds 0, 1, 2
    x = {2: 0.90, 0: 0.80, 1: 0.85, 9: 0.10}
    y = {0: 0.78, 1: 0.80, 2: 0.89}
    d = paired_difference(x, y)
    assert d.seeds == (0, 1, 2) and d.mean == pytest.approx(0.08 / 3)
    # Σ (d − d̄)² = 0.00086667, / (n − 1) = 0.00043333, sd = 0.020817, se = 0.012019
    assert d.se == pytest.approx(0.0120185, abs=1e-6)
    assert d.high - d.mean == pytest.approx(4.302653 * 0.0120185, abs=1e-5)


def test_five_seeds_and_other_levels():
    # d = 0.5, 1.5, 1.0, 2.0, 1.0: mean 1.2, Σ (d − d̄)² = 1.3, sd = sqrt(0.325), se = sd/√5
    x = {s: 10.0 + s for s in range(5)}
    y = {s: x[s] - d for s, d in enumerate([0.5, 1.5, 1.0, 2.0, 1.0])}
    se = math.sqrt(0.325 / 5)
    d95, d90 = paired_difference(x, y), paired_difference(x, y, level=0.9)
    assert d95.mean == pytest.approx(1.2) and d95.se == pytest.approx(se)
    assert d95.high - d95.mean == pytest.approx(2.776445 * se, abs=1e-6)  # t_{0.975, 4}
    assert d90.high - d90.mean == pytest.approx(2.131847 * se, abs=1e-6)  # t_{0.95, 4}


def test_pairing_removes_what_the_seeds_share():
    # each seed moves both methods by the same amount: Welch's se sees that spread, the paired one does not
    shared = [0.0, 0.10, -0.05, 0.20, -0.10]
    x = {s: 0.80 + v + 0.02 for s, v in enumerate(shared)}
    y = {s: 0.80 + v for s, v in enumerate(shared)}
    d = paired_difference(x, y)
    assert d.mean == pytest.approx(0.02) and d.se == pytest.approx(0.0, abs=1e-12)
    assert d.low == pytest.approx(0.02) and d.high == pytest.approx(0.02)


def test_fewer_than_two_common_seeds_or_a_bad_level():
    assert paired_difference({0: 1.0, 1: 2.0}, {1: 1.0, 2: 0.0}) is None
    assert paired_difference({}, {}) is None
    with pytest.raises(ValueError, match="level"):
        paired_difference({0: 1.0, 1: 2.0}, {0: 1.0, 1: 0.0}, level=1.0)
