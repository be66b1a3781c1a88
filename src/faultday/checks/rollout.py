"""Canary analysis over the client's records: one model version against another, same window.

Both sides are judged in the same window under the same load, so a ratio says
what the new version changes and nothing else (a baseline taken earlier would
also compare the load and the machine). Records carry the model that answered
(``model`` in the chat response) and its completion tokens (``usage``).
"""

from __future__ import annotations

import statistics
from typing import ClassVar, Literal

from pydantic import Field

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import (
    Bounds,
    Fmt,
    Secs,
    Times,
    insufficient,
    judged,
    matches,
    requests_in,
)
from faultday.core.records import RequestRecord, metric_values, percentile
from faultday.core.windows import CheckResult, Window


class _CompareParams(Bounds):
    model: str = Field(description="the model (glob) judged, e.g. the canary's name")
    against: str | None = Field(
        default=None, description="reference model (glob): the figure becomes a ratio to it"
    )
    request: str | None = Field(default=None, description="only requests whose name matches")
    min_samples: int = Field(default=10, ge=1, description="per side")


class TokenLengthParams(_CompareParams):
    percentile: float | None = Field(
        default=None, gt=0, le=100, description="a percentile instead of the mean"
    )


class LatencyRatioParams(_CompareParams):
    against: str = Field(description="reference model (glob), e.g. the primary's name")
    metric: Literal["e2e", "ttft"] = "e2e"
    percentile: float = Field(default=50.0, gt=0, le=100)


class Tokens(Fmt):
    def __call__(self, v: float) -> str:
        return f"{v:.4g} tok"


def _of_model(rs: list[RequestRecord], pattern: str) -> list[RequestRecord]:
    # Successful answers only: a failed request has no model and no tokens to compare.
    return [r for r in rs if r.ok and r.model and matches(r.model, (pattern,))]


def _too_few(
    check: str, label: str, window: Window, sides: list[tuple[str, int]], need: int
) -> CheckResult | None:
    for who, n in sides:
        if n < need:
            return insufficient(check, label, window, n=n, need=need, what=f"answers by {who}")
    return None


def _ratio(
    check: str,
    label: str,
    window: Window,
    params: _CompareParams,
    *,
    mine: list[float],
    ref: list[float],
    value: float,
    base: float,
    fmt: Fmt,
) -> CheckResult:
    """``value ÷ base`` against the bounds; the message gives both figures and both counts."""
    return judged(
        check,
        label,
        window,
        value / base,
        bounds=params,
        fmt=Times(),
        n=len(mine) + len(ref),
        message=f"{fmt(value)} vs {fmt(base)} (n={len(mine)} vs {len(ref)})",
    )


class TokenLength(Check[TokenLengthParams]):
    """Completion tokens per answer of a model (mean or a percentile), or its ratio to another's."""

    name: ClassVar[str] = "token_length"
    summary: ClassVar[str] = (
        "completion tokens per answer of a model, or the ratio to another model"
    )
    Params = TokenLengthParams

    @staticmethod
    def _stat(values: list[float], p: float | None) -> float:
        return statistics.fmean(values) if p is None else percentile(values, p)

    def evaluate(self, ctx: CheckContext, params: TokenLengthParams, window: Window) -> CheckResult:
        stat = "mean" if params.percentile is None else f"p{params.percentile:g}"
        label = f"token_length {stat} {params.model}"
        if params.against:
            label += f" / {params.against}"
        rs = requests_in(ctx, window, params.request)
        mine = [float(r.tokens) for r in _of_model(rs, params.model) if r.tokens > 0]
        ref = (
            [float(r.tokens) for r in _of_model(rs, params.against) if r.tokens > 0]
            if params.against
            else []
        )
        sides = [(params.model, len(mine))] + (
            [(params.against, len(ref))] if params.against else []
        )
        if (short := _too_few(self.name, label, window, sides, params.min_samples)) is not None:
            return short
        value = self._stat(mine, params.percentile)
        if not params.against:
            return judged(self.name, label, window, value, bounds=params, fmt=Tokens(), n=len(mine))
        base = self._stat(ref, params.percentile)
        return _ratio(
            self.name,
            label,
            window,
            params,
            mine=mine,
            ref=ref,
            value=value,
            base=base,
            fmt=Tokens(),
        )


class LatencyRatio(Check[LatencyRatioParams]):
    """A latency percentile of one model's answers ÷ the same percentile of another's."""

    name: ClassVar[str] = "latency_ratio"
    summary: ClassVar[str] = (
        "latency percentile of a model's answers ÷ another model's, same window"
    )
    Params = LatencyRatioParams

    def evaluate(
        self, ctx: CheckContext, params: LatencyRatioParams, window: Window
    ) -> CheckResult:
        p = params.percentile
        label = f"latency_ratio {params.metric} p{p:g} {params.model} / {params.against}"
        rs = requests_in(ctx, window, params.request)
        mine = metric_values(_of_model(rs, params.model), params.metric)
        ref = metric_values(_of_model(rs, params.against), params.metric)
        sides = [(params.model, len(mine)), (params.against, len(ref))]
        if (short := _too_few(self.name, label, window, sides, params.min_samples)) is not None:
            return short
        value, base = percentile(mine, p), percentile(ref, p)
        if base <= 0:
            return insufficient(
                self.name, label, window, n=len(ref), need=1, what="reference latencies above 0"
            )
        return _ratio(
            self.name, label, window, params, mine=mine, ref=ref, value=value, base=base, fmt=Secs()
        )
