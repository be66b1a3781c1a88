"""A robust trend: the Theil–Sen slope with Sen's confidence interval.

Written here rather than taken from ``scipy.stats.theilslopes`` because scipy is
not otherwise a dependency of the harness (a 35 MB wheel for thirty lines); the
interval follows Sen (1968) exactly as scipy computes it (normal approximation of
Kendall's S, with its tie correction), and ``tests/soak/test_trend.py`` checks it
against known data.

The slope is the median of the slopes between every pair of points, so a few
outliers (a GC pause, one slow interval) do not move it. The interval assumes
independent errors: samples of a slowly varying quantity (RSS every second) are
correlated, which makes it narrower than it should be. Thinning long series into
``max_points`` medians (below) keeps the pairs affordable and blunts that.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MAX_POINTS = 300  # pairs grow as n²: 300 points are 44 850 slopes


@dataclass(frozen=True, slots=True)
class Trend:
    """A slope (units of y per unit of x) and its confidence interval."""

    slope: float
    low: float
    high: float
    n: int  # points the slope was computed from (after thinning)
    confidence: float


def thin(xs: Sequence[float], ys: Sequence[float], *, max_points: int) -> tuple[list[float], ...]:
    """At most ``max_points`` points: consecutive groups replaced by their medians."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    out_x, out_y = [], []
    for k in range(max_points):
        lo, hi = k * n // max_points, (k + 1) * n // max_points
        out_x.append(statistics.median(xs[lo:hi]))
        out_y.append(statistics.median(ys[lo:hi]))
    return out_x, out_y


def _tie_term(values: Sequence[float]) -> float:
    return float(sum(k * (k - 1) * (2 * k + 5) for k in Counter(values).values() if k > 1))


def theil_sen(
    xs: Sequence[float],
    ys: Sequence[float],
    *,
    confidence: float = 0.95,
    max_points: int = MAX_POINTS,
) -> Trend:
    """The Theil–Sen slope of ``ys`` over ``xs`` with Sen's two-sided interval.

    ValueError with fewer than three points or fewer than two distinct x.
    """
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} x values but {len(ys)} y values")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), not {confidence}")
    px, py = thin(xs, ys, max_points=max_points)
    n = len(px)
    slopes = sorted(
        (py[j] - py[i]) / (px[j] - px[i])
        for i in range(n)
        for j in range(i + 1, n)
        if px[j] != px[i]
    )
    if n < 3 or not slopes:
        raise ValueError(f"a trend needs at least 3 points at 2 distinct times, got {n}")
    nt = len(slopes)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    # Variance of Kendall's S under no trend, less the ties in x and in y (Sen 1968).
    var = (n * (n - 1) * (2 * n + 5) - _tie_term(px) - _tie_term(py)) / 18.0
    spread = z * math.sqrt(max(var, 0.0))
    upper = min(round((nt + spread) / 2), nt - 1)
    lower = max(round((nt - spread) / 2) - 1, 0)
    return Trend(
        slope=statistics.median(slopes),
        low=slopes[lower],
        high=slopes[upper],
        n=n,
        confidence=confidence,
    )
