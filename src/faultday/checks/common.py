"""Shared pieces of the recorded-series checks: params, thresholds, formatting, selections."""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import ConfigDict, Field, model_validator

from faultday.checks.base import CheckContext, CheckParams
from faultday.core.durations import format_duration
from faultday.core.records import RequestRecord, Sample
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind


class Params(CheckParams):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Bounds(Params):
    """``min`` and/or ``max`` (at least one)."""

    min_: float | None = Field(default=None, alias="min")
    max_: float | None = Field(default=None, alias="max")

    @model_validator(mode="after")
    def _one_bound(self) -> Bounds:
        if self.min_ is None and self.max_ is None:
            raise ValueError("give min, max or both")
        if self.min_ is not None and self.max_ is not None and self.min_ > self.max_:
            raise ValueError(f"min ({self.min_:g}) is above max ({self.max_:g})")
        return self


class ShareBounds(Bounds):
    """Bounds on a share (of requests, of queries): each in [0, 1], 0.05 = 5%."""

    min_: float | None = Field(default=None, alias="min", ge=0, le=1, description="share, 0-1")
    max_: float | None = Field(default=None, alias="max", ge=0, le=1, description="share, 0-1")


class Bounded(Protocol):
    """What a figure is judged against: ``Bounds`` params, or any with ``min_``/``max_``."""

    @property
    def min_(self) -> float | None: ...

    @property
    def max_(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that are not a check's own ``min``/``max`` params (e.g. a ``max`` alone)."""

    min_: float | None = None
    max_: float | None = None


def within(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def expected_text(lo: float | None, hi: float | None, fmt: type[Fmt] | Fmt) -> str:
    f = fmt if isinstance(fmt, Fmt) else fmt()
    if lo is not None and hi is not None:
        return f"between {f(lo)} and {f(hi)}"
    if lo is not None:
        return f"≥ {f(lo)}"
    if hi is None:
        raise ValueError("a range needs a lower or an upper bound")
    return f"≤ {f(hi)}"


class Fmt:
    """How a figure reads in a failure message."""

    def __call__(self, v: float) -> str:
        return f"{v:.4g}"


class Pct(Fmt):
    def __call__(self, v: float) -> str:
        return f"{v * 100:.3g}%"


class Secs(Fmt):
    def __call__(self, v: float) -> str:
        if v == float("inf"):
            return "never"
        return format_duration(round(v, 3)) if v >= 0.001 else f"{v * 1e6:.0f}us"


class Rate(Fmt):
    def __init__(self, unit: str = "/s") -> None:
        self.unit = unit

    def __call__(self, v: float) -> str:
        return f"{v:.4g}{self.unit}"


class Times(Fmt):
    """A ratio: ``1.5x``."""

    def __call__(self, v: float) -> str:
        return f"{v:.3g}x"


class Count(Fmt):
    def __call__(self, v: float) -> str:
        return f"{int(v)}"


def judged(
    check: str,
    label: str,
    window: Window,
    value: float,
    *,
    bounds: Bounded,
    fmt: Fmt,
    n: int,
    message: str = "",
) -> CheckResult:
    """The figure against ``bounds``: PASSED inside them, FAILED outside."""
    lo, hi = bounds.min_, bounds.max_
    verdict = Verdict.PASSED if within(value, lo, hi) else Verdict.FAILED
    return CheckResult(
        check,
        label,
        window.label,
        verdict,
        expected_text(lo, hi, fmt),
        fmt(value),
        n=n,
        message=message,
    )


def from_problems(
    check: str,
    label: str,
    window: Window,
    problems: Sequence[str],
    *,
    expected: str,
    observed: str,
    n: int,
) -> CheckResult:
    """FAILED with every problem in the message, or PASSED when there is none."""
    verdict = Verdict.FAILED if problems else Verdict.PASSED
    return CheckResult(
        check, label, window.label, verdict, expected, observed, n=n, message="; ".join(problems)
    )


def unjudged(check: str, label: str, window: Window, verdict: Verdict, message: str) -> CheckResult:
    """No figure to judge: INSUFFICIENT (nothing to measure) or ERROR (the check is misused)."""
    return CheckResult(check, label, window.label, verdict, message=message)


def no_fault(check: str, label: str, window: Window, how: str) -> CheckResult:
    """ERROR: a check about one fault, in a window of none and given no ``fault:``."""
    return unjudged(check, label, window, Verdict.ERROR, f"name the fault: {how}")


def insufficient(
    check: str, label: str, window: Window, *, n: int, need: int, what: str
) -> CheckResult:
    return CheckResult(
        check,
        label,
        window.label,
        Verdict.INSUFFICIENT,
        n=n,
        message=f"too few {what} to judge: {n} in the window, need at least {need}",
    )


def done_at(r: RequestRecord, scale: float) -> float:
    """When the answer (or the error) came, in scenario seconds; ``duration`` is real seconds."""
    return r.t + r.duration / scale


def requests_in(
    ctx: CheckContext,
    window: Window,
    pattern: str | None = None,
    model: str | None = None,
    *,
    every_send: bool = False,
) -> list[RequestRecord]:
    """Client requests sent inside the window, optionally only those whose name matches a glob.

    Agent-task outcomes (name ``task``) are not requests; only the tasks checks read them.
    ``model`` (a glob) keeps the requests answered by that model; a failed request
    names no model, so a per-model selection holds only answered requests.

    The baseline is the stack before any fault: a request sent in it but still in
    flight when the first fault starts is served (in part) under that fault, so it
    is left out (at ``--time-scale 0.1`` one of 2 s real spans 20 scenario seconds,
    and gpu-throttle's baseline p99 was the throttled tail). ``every_send`` keeps
    it, for a count of what was sent (retry amplification's denominator).
    """
    records = ctx.observations.requests_between(window.start, window.end)
    if window.kind is WindowKind.BASELINE and not every_send:
        records = [r for r in records if done_at(r, ctx.time_scale) <= window.end]
    if pattern is None:
        out = [r for r in records if r.name != "task"]
    else:
        out = [r for r in records if fnmatch.fnmatchcase(r.name, pattern)]
    if model is None:
        return out
    return [r for r in out if fnmatch.fnmatchcase(r.model, model)]


def matches(value: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def series(
    ctx: CheckContext, name: str, window: Window, labels: dict[str, str] | None = None
) -> dict[tuple[tuple[str, str], ...], list[Sample]]:
    """Scraped samples of one metric in the window, one list per label set, in time order."""
    out: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
    for s in ctx.observations.samples_between(name, window.start, window.end, labels=labels):
        out.setdefault(s.labels, []).append(s)
    for v in out.values():
        v.sort(key=lambda s: s.t)
    return out


def increase(samples: Sequence[Sample]) -> float:
    """How much a counter grew over the samples; a drop means the process restarted."""
    total = 0.0
    for a, b in itertools.pairwise(samples):
        total += b.value - a.value if b.value >= a.value else b.value
    return total


def counter_increase(
    ctx: CheckContext, name: str, window: Window, labels: dict[str, str] | None = None
) -> tuple[float, int]:
    """Growth of a counter (summed over label sets) across the window, and the samples used.

    The last sample before the window is the starting point, so growth between
    that scrape and the window's first scrape is not lost.
    """
    total, used = 0.0, 0
    every = ctx.observations.samples_between(name, float("-inf"), window.end, labels=labels)
    by_labels: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
    for s in sorted(every, key=lambda s: s.t):
        by_labels.setdefault(s.labels, []).append(s)
    for samples in by_labels.values():
        before = [s for s in samples if s.t < window.start][-1:]
        inside = [s for s in samples if s.t >= window.start]
        if not inside:
            continue
        total += increase(before + inside)
        used += len(inside)
    return total, used
