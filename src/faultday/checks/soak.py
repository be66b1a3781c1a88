"""The drift check of a soak: does a series keep growing, beyond a stated margin?

A soak (``load.shape: soak``, docs/soak.md) runs steady load and asks whether
anything creeps: a component's memory or open FDs, the p99 latency or the error
rate per interval, preemptions. The check fits the Theil–Sen slope with Sen's
confidence interval (``checks.trend``) and judges only what the interval shows:

* FAILED when the whole interval lies above ``max_slope``;
* PASSED when the whole interval lies below it;
* INSUFFICIENT when it straddles the margin (run longer) or there are too few points.

Slopes are per real (wall-clock) minute: a process leaks in real time, so at
``--time-scale 0.1`` the scenario's seconds are converted back to real ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import Params, insufficient, requests_in
from faultday.checks.trend import theil_sen
from faultday.core.durations import shown
from faultday.core.records import bins, metric_values, percentile
from faultday.core.types import Duration
from faultday.core.windows import CheckResult, Verdict, Window

RSS = "proc_rss_bytes"  # written by faultday.observe.procs (a soak's process sampler)
FDS = "proc_open_fds"
PREEMPTIONS = "vllm:num_preemptions_total"


class DriftSeries(StrEnum):
    RSS = "rss"  # a component's resident memory (process tree), sampled each interval
    FDS = "fds"  # its open file descriptors
    E2E_P99 = "e2e_p99"  # p99 end-to-end latency of the requests in each interval
    TTFT_P99 = "ttft_p99"  # p99 time to first token in each interval
    ERROR_RATE = "error_rate"  # share of failed requests in each interval
    PREEMPTIONS = "preemptions"  # vLLM's preemption counter (a slope is its rate)
    METRIC = "metric"  # any scraped metric, as scraped


@dataclass(frozen=True, slots=True)
class Unit:
    """How a series' values read: the base unit, and the units a margin may be given in."""

    shown: str
    scale: float  # base units per shown unit
    accepted: dict[str, float]


_BYTES = {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "kB": 1e3, "MB": 1e6}
_SECONDS = {"s": 1.0, "ms": 1e-3}
_SHARE = {"%": 0.01, "": 1.0}
_COUNT = {"": 1.0}
UNITS: dict[DriftSeries, Unit] = {
    DriftSeries.RSS: Unit("MiB", 2.0**20, _BYTES),
    DriftSeries.FDS: Unit("", 1.0, _COUNT),
    DriftSeries.E2E_P99: Unit("ms", 1e-3, _SECONDS),
    DriftSeries.TTFT_P99: Unit("ms", 1e-3, _SECONDS),
    DriftSeries.ERROR_RATE: Unit("%", 0.01, _SHARE),
    DriftSeries.PREEMPTIONS: Unit("", 1.0, _COUNT),
    DriftSeries.METRIC: Unit("", 1.0, _COUNT),
}
_PER = {"s": 1 / 60, "min": 1.0, "h": 60.0}  # per-minute factor of each time unit
_SLOPE = re.compile(
    r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*/\s*(\w+)\s*$"
)


SAMPLED = frozenset({DriftSeries.RSS, DriftSeries.FDS, DriftSeries.PREEMPTIONS, DriftSeries.METRIC})
"""Series with a point per sample (every ``load.sample_interval``); the others have one per
full ``interval`` of requests."""
PROCESS_SERIES = frozenset({DriftSeries.RSS, DriftSeries.FDS})
"""Sampled by the process sampler, which runs only under ``load.shape: soak``."""


def parse_slope(text: object, series: DriftSeries) -> float:
    """``5MiB/min``, ``200ms/min``, ``1%/min``, ``3/h`` → base units per minute, finite and
    positive. ValueError naming what is wrong and what is valid."""
    unit = UNITS[series]
    valid = ", ".join(f"{u or '(none)'}" for u in unit.accepted)
    example = f"5{unit.shown}/min"
    if isinstance(text, bool) or not isinstance(text, str):
        # ValueError, not TypeError: pydantic reports only ValueError as a validation error.
        if isinstance(text, int | float) and not isinstance(text, bool):
            raise ValueError(  # noqa: TRY004
                f"max_slope {shown(text)} has no unit; write it as <number><unit>/<s|min|h>, "
                f"e.g. {shown(text)}{unit.shown}/min (units for {series}: {valid})"
            )
        raise ValueError(f"max_slope must be text such as {example}, not {shown(text)}")  # noqa: TRY004
    m = _SLOPE.match(text)
    if m is None:
        raise ValueError(
            f"max_slope {shown(text)} is not <number><unit>/<s|min|h> (e.g. {example}); "
            f"units for {series}: {valid}"
        )
    number, name, per = m.groups()
    if name not in unit.accepted:
        raise ValueError(
            f"max_slope {shown(text)}: unit {name!r} does not fit {series}; valid: {valid}"
        )
    if per not in _PER:
        raise ValueError(f"max_slope {shown(text)}: per {shown(per)}; valid: s, min, h")
    value = float(number) * unit.accepted[name] / _PER[per]
    if not math.isfinite(value):
        raise ValueError(
            f"max_slope {shown(text)} is too large to be a number; a margin is finite, "
            f"e.g. {example}"
        )
    if value <= 0:
        raise ValueError(
            f"max_slope {shown(text)} is not above zero; the margin is the growth that "
            f"fails the check, a positive number such as {example}"
        )
    return value


class DriftParams(Params):
    series: DriftSeries = Field(description="what must not creep: " + ", ".join(DriftSeries))
    target: str | None = Field(
        default=None, description="the component (rss, fds: required; metric: a filter)"
    )
    metric: str | None = Field(default=None, description="series: metric — the sample name")
    max_slope: str = Field(
        description="the margin, per minute of real time: 5MiB/min, 2/min, 50ms/min, 0.5%/min"
    )
    confidence: float = Field(default=0.95, ge=0.5, lt=1, description="of the slope's interval")
    interval: Duration = Field(
        default=5.0, gt=0, description="latency and error series: the width of each interval"
    )
    min_points: int = Field(default=10, ge=3, description="fewer points → INSUFFICIENT")

    @field_validator("max_slope", mode="before")
    @classmethod
    def _slope(cls, value: object, info: ValidationInfo) -> object:
        series = info.data.get("series")
        if isinstance(series, DriftSeries):  # else the series' own error says what is wrong
            parse_slope(value, series)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DriftParams:
        if self.series in PROCESS_SERIES and not self.target:
            raise ValueError(f"series {self.series} needs a target component")
        if (self.series == DriftSeries.METRIC) != bool(self.metric):
            raise ValueError("give metric exactly when series is metric")
        return self

    @property
    def margin(self) -> float:
        """``max_slope`` in base units a minute."""
        return parse_slope(self.max_slope, self.series)

    def step(self, sample_interval: float) -> float:
        """Scenario seconds between two of this check's points."""
        return sample_interval if self.series in SAMPLED else self.interval

    def points_in(self, length: float, sample_interval: float) -> int:
        """The most points a window of ``length`` seconds can give."""
        step = self.step(sample_interval)
        # A sampled series may have a sample at both ends; an interval counts only when full.
        return math.floor(length / step) + (1 if self.series in SAMPLED else 0)

    def length_for(self, points: int, sample_interval: float) -> float:
        """The shortest window that gives ``points`` points."""
        gaps = points - 1 if self.series in SAMPLED else points
        return gaps * self.step(sample_interval)


Points = tuple[list[float], list[float]]


class Drift(Check[DriftParams]):
    """Theil–Sen slope of a series over the window, judged by its confidence interval."""

    name: ClassVar[str] = "drift"
    summary: ClassVar[str] = "a series' Theil–Sen slope (with its interval) against a margin"
    Params = DriftParams

    def evaluate(self, ctx: CheckContext, params: DriftParams, window: Window) -> CheckResult:
        unit = UNITS[params.series]
        margin = params.margin
        what = params.metric if params.series == DriftSeries.METRIC else params.series.value
        label = f"drift {what}" + (f" {params.target}" if params.target else "")
        xs, ys = _points(ctx, params, window)
        if len(xs) < params.min_points:
            return insufficient(
                self.name,
                label,
                window,
                n=len(xs),
                need=params.min_points,
                what="points (too short)",
            )
        trend = theil_sen(xs, ys, confidence=params.confidence)
        # Scenario seconds → real minutes: 60 s, stretched back by the time scale.
        per_min = 60.0 / ctx.time_scale
        show = _shower(unit)
        low, high = trend.low * per_min, trend.high * per_min
        pct = f"{params.confidence * 100:g}%"
        expected = f"slope ≤ {show(margin)} (whole {pct} interval)"
        observed = (
            f"slope {show(trend.slope * per_min, sign=True)}, {pct} CI "
            f"[{show(low, sign=True, unit_text=False)}, {show(high, sign=True, unit_text=False)}]"
        )
        span = f"Theil–Sen over {len(xs)} points, {xs[-1] - xs[0]:.0f}s"
        if low > margin:
            verdict, message = Verdict.FAILED, f"{span}: the whole interval is above the margin"
        elif high < margin:
            verdict, message = Verdict.PASSED, f"{span}: the whole interval is below the margin"
        else:
            verdict = Verdict.INSUFFICIENT
            message = f"{span}: the interval straddles the margin {show(margin)}; run longer"
        return CheckResult(
            self.name, label, window.label, verdict, expected, observed, n=len(xs), message=message
        )


def _shower(unit: Unit) -> Callable[..., str]:
    """Base units a minute → ``+61.2 MiB/min`` (``unit=False``: the number alone)."""

    def show(v: float, *, sign: bool = False, unit_text: bool = True) -> str:
        text = f"{v / unit.scale:+.4g}" if sign else f"{v / unit.scale:.4g}"
        if not unit_text:
            return text
        gap = " " if unit.shown.isalpha() else ""
        return f"{text}{gap}{unit.shown}/min"

    return show


def _points(ctx: CheckContext, p: DriftParams, window: Window) -> Points:
    if p.series in (DriftSeries.RSS, DriftSeries.FDS, DriftSeries.PREEMPTIONS, DriftSeries.METRIC):
        name = {DriftSeries.RSS: RSS, DriftSeries.FDS: FDS, DriftSeries.PREEMPTIONS: PREEMPTIONS}
        return _scraped(ctx, name.get(p.series, p.metric or ""), window, p.target)
    return _per_interval(ctx, p, window)


def _scraped(ctx: CheckContext, name: str, window: Window, target: str | None) -> Points:
    """The samples in the window; several label sets are summed per round (scrape time)."""
    labels = {"component": target} if target else None
    per_t: dict[float, float] = {}
    for s in ctx.observations.samples_between(name, window.start, window.end, labels=labels):
        per_t[s.t] = per_t.get(s.t, 0.0) + s.value
    ts = sorted(per_t)
    return ts, [per_t[t] for t in ts]


def _per_interval(ctx: CheckContext, p: DriftParams, window: Window) -> Points:
    """One point per full interval that had requests: its p99 latency or its error share."""
    records = requests_in(ctx, window)
    end = window.start + math.floor(window.length / p.interval) * p.interval
    xs, ys = [], []
    for b in bins(records, interval=p.interval, start=window.start, end=end):
        if not b.records:
            continue  # no requests, no figure: a gap rather than a zero
        if p.series == DriftSeries.ERROR_RATE:
            value = sum(1 for r in b.records if not r.ok) / len(b.records)
        else:
            metric = "e2e" if p.series == DriftSeries.E2E_P99 else "ttft"
            values = metric_values(b.records, metric)
            if not values:
                continue
            value = percentile(values, 99)
        xs.append(b.start + p.interval / 2)
        ys.append(value)
    return xs, ys
