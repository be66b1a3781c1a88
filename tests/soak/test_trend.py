"""The Theil–Sen slope and Sen's interval against data whose trend is known."""

from __future__ import annotations

import random

import pytest

from faultday.checks.trend import MAX_POINTS, theil_sen, thin


def noisy(slope: float, n: int, *, sd: float, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    xs = [float(i) for i in range(n)]
    return xs, [10.0 + slope * x + rng.gauss(0.0, sd) for x in xs]


def test_an_exact_line_has_its_slope_and_a_zero_width_interval() -> None:
    xs = [float(i) for i in range(20)]
    t = theil_sen(xs, [2.0 * x + 1.0 for x in xs])
    assert (t.slope, t.low, t.high) == (2.0, 2.0, 2.0)
    assert t.n == 20


def test_a_noisy_line_is_found_and_its_interval_excludes_zero() -> None:
    xs, ys = noisy(3.0, 60, sd=5.0, seed=1)
    t = theil_sen(xs, ys)
    assert t.low < 3.0 < t.high
    assert 2.6 < t.slope < 3.4
    assert t.low > 0  # a clear trend: zero is far outside


def test_a_flat_series_has_an_interval_around_zero() -> None:
    xs, ys = noisy(0.0, 60, sd=5.0, seed=2)
    t = theil_sen(xs, ys)
    assert t.low < 0.0 < t.high
    assert t.high - t.low < 0.5  # narrow enough to say "flat" against a margin of 0.5


def test_outliers_do_not_move_the_slope() -> None:
    xs, ys = noisy(1.0, 50, sd=0.5, seed=3)
    for i in range(0, 50, 10):  # every tenth point a wild spike (a GC pause, one slow interval)
        ys[i] += 1000.0
    t = theil_sen(xs, ys)
    assert 0.9 < t.slope < 1.1


def test_the_interval_covers_the_true_slope_about_as_often_as_it_claims() -> None:
    # Sen's interval at 95% on independent noise: the true slope inside in ~95 of 100 series.
    covered = 0
    for seed in range(200):
        xs, ys = noisy(0.7, 30, sd=2.0, seed=100 + seed)
        t = theil_sen(xs, ys, confidence=0.95)
        covered += t.low <= 0.7 <= t.high
    assert 0.90 * 200 <= covered <= 0.99 * 200, covered


def test_a_higher_confidence_gives_a_wider_interval() -> None:
    xs, ys = noisy(1.0, 40, sd=3.0, seed=4)
    narrow, wide = theil_sen(xs, ys, confidence=0.8), theil_sen(xs, ys, confidence=0.99)
    assert wide.low <= narrow.low <= narrow.slope <= narrow.high <= wide.high
    assert wide.high - wide.low > narrow.high - narrow.low


def test_too_few_points_or_one_instant_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 points"):
        theil_sen([0.0, 1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="at least 3 points"):
        theil_sen([5.0, 5.0, 5.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="x values but"):
        theil_sen([0.0, 1.0, 2.0], [0.0, 1.0])


def test_a_long_series_is_thinned_to_medians_and_keeps_its_slope() -> None:
    xs, ys = noisy(0.25, 5000, sd=3.0, seed=5)
    t = theil_sen(xs, ys)
    assert t.n == MAX_POINTS
    assert t.low < 0.25 < t.high
    tx, ty = thin([0.0, 1.0, 2.0, 3.0], [5.0, 1.0, 3.0, 7.0], max_points=2)
    assert (tx, ty) == ([0.5, 2.5], [3.0, 5.0])
