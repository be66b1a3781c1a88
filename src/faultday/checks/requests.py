"""Checks over the client's request records: errors, latency, throughput, degradation, recovery."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import (
    Bounds,
    Limits,
    Params,
    Pct,
    Rate,
    Secs,
    ShareBounds,
    counter_increase,
    insufficient,
    judged,
    matches,
    no_fault,
    requests_in,
    unjudged,
    within,
)
from faultday.core.records import RequestRecord, bins, metric_values, percentile
from faultday.core.types import Duration
from faultday.core.windows import CheckResult, Verdict, Window
from faultday_wire.metrics import VLLM_QUEUE_TIME

# ---------------------------------------------------------------- error_rate


class ErrorRateParams(ShareBounds):
    request: str | None = Field(default=None, description="only requests whose name matches (glob)")
    min_samples: int = Field(default=10, ge=1)


class ErrorRate(Check[ErrorRateParams]):
    """Share of client requests that failed (no response, HTTP ≥ 400, or a broken stream)."""

    name: ClassVar[str] = "error_rate"
    summary: ClassVar[str] = "share of client requests that failed, in [0, 1]"
    Params = ErrorRateParams

    def evaluate(self, ctx: CheckContext, params: ErrorRateParams, window: Window) -> CheckResult:
        rs = requests_in(ctx, window, params.request)
        if len(rs) < params.min_samples:
            return insufficient(
                self.name, self.name, window, n=len(rs), need=params.min_samples, what="requests"
            )
        failed = [r for r in rs if not r.ok]
        top = _top_errors(failed)
        return judged(
            self.name,
            self.name,
            window,
            len(failed) / len(rs),
            bounds=params,
            fmt=Pct(),
            n=len(rs),
            message=top,
        )


def _top_errors(failed: list[RequestRecord]) -> str:
    if not failed:
        return ""
    counts: dict[str, int] = {}
    for r in failed:
        key = r.error or f"HTTP {r.status}"
        counts[key] = counts.get(key, 0) + 1
    best = sorted(counts.items(), key=lambda kv: -kv[1])[:2]
    return "most: " + "; ".join(f"{k} x{v}" for k, v in best)


# ---------------------------------------------------------------- latency


class LatencyParams(Params):
    metric: Literal["e2e", "ttft", "itl", "queue"] = "e2e"
    percentile: float = Field(default=99.0, gt=0, le=100)
    max_: Duration | None = Field(default=None, alias="max")
    min_: Duration | None = Field(default=None, alias="min")
    request: str | None = Field(default=None, description="only requests whose name matches (glob)")
    ok_only: bool = Field(default=False, description="judge successful requests only")
    model: str | None = Field(
        default=None, description="only requests answered by this model (glob)"
    )
    target: str | None = Field(default=None, description="queue: the LLM component scraped")
    min_samples: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _bound(self) -> LatencyParams:
        if self.max_ is None and self.min_ is None:
            raise ValueError("give max (or min) as a duration, e.g. max: 1.5s")
        return self


QUEUE_METRIC = VLLM_QUEUE_TIME


class Latency(Check[LatencyParams]):
    """A latency percentile (end-to-end, TTFT, inter-token, or the LLM queue) against a bound."""

    name: ClassVar[str] = "latency"
    summary: ClassVar[str] = "percentile of e2e, ttft, itl or queue latency, exact from raw events"
    Params = LatencyParams

    def evaluate(self, ctx: CheckContext, params: LatencyParams, window: Window) -> CheckResult:
        p = params.percentile
        label = f"latency {params.metric} p{p:g}"
        if params.metric == "queue":
            return self._queue(ctx, params, window, label)
        rs = requests_in(ctx, window, params.request, params.model)
        if params.ok_only:
            rs = [r for r in rs if r.ok]
        values = metric_values(rs, params.metric)
        if len(values) < params.min_samples:
            what = {"e2e": "requests", "ttft": "streamed requests", "itl": "token gaps"}[
                params.metric
            ]
            return insufficient(
                self.name, label, window, n=len(values), need=params.min_samples, what=what
            )
        return judged(
            self.name,
            label,
            window,
            percentile(values, p),
            bounds=params,
            fmt=Secs(),
            n=len(values),
        )

    def _queue(
        self, ctx: CheckContext, params: LatencyParams, window: Window, label: str
    ) -> CheckResult:
        labels = {"component": params.target} if params.target else {}
        name = f"{QUEUE_METRIC}_bucket"
        les = {
            dict(s.labels).get("le", "+Inf")
            for s in ctx.observations.samples_between(name, window.start, window.end, labels=labels)
        }
        buckets = sorted(
            (float(le), counter_increase(ctx, name, window, {**labels, "le": le})[0]) for le in les
        )
        total = buckets[-1][1] if buckets else 0.0
        if total < params.min_samples:
            return insufficient(
                self.name,
                label,
                window,
                n=int(total),
                need=params.min_samples,
                what="queued requests (scraped)",
            )
        want = params.percentile / 100 * total
        value = next((le for le, c in buckets if c >= want), math.inf)
        return judged(
            self.name,
            label,
            window,
            value,
            bounds=params,
            fmt=Secs(),
            n=int(total),
            message="from scraped histogram buckets (an upper bound)",
        )


# ---------------------------------------------------------------- throughput, goodput


class ThroughputParams(Bounds):
    unit: Literal["requests", "tokens"] = "requests"
    ok_only: bool = Field(default=True, description="count successful requests only")
    request: str | None = None
    model: str | None = Field(
        default=None, description="only requests answered by this model (glob)"
    )
    min_window: Duration = Field(default=1.0, description="shorter windows are not judged")


class Throughput(Check[ThroughputParams]):
    """Requests (or tokens) per second over the window."""

    name: ClassVar[str] = "throughput"
    summary: ClassVar[str] = "requests/s or tokens/s over the window"
    Params = ThroughputParams

    def evaluate(self, ctx: CheckContext, params: ThroughputParams, window: Window) -> CheckResult:
        return _per_second(
            self.name, ctx, params, window, counts=lambda r: r.ok or not params.ok_only
        )


class GoodputParams(Bounds):
    unit: Literal["tokens", "requests"] = "tokens"
    slo_ttft: Duration | None = None
    slo_e2e: Duration | None = None
    slo_itl: Duration | None = Field(default=None, description="every token gap of the request")
    request: str | None = None
    model: str | None = Field(
        default=None, description="only requests answered by this model (glob)"
    )
    min_window: Duration = 1.0

    @model_validator(mode="after")
    def _some_slo(self) -> GoodputParams:
        if self.slo_ttft is None and self.slo_e2e is None and self.slo_itl is None:
            raise ValueError("give at least one of slo_ttft, slo_e2e, slo_itl")
        return self


class Goodput(Check[GoodputParams]):
    """Tokens/s (or requests/s) from successful requests that met every latency SLO given."""

    name: ClassVar[str] = "goodput"
    summary: ClassVar[str] = "tokens/s from requests that met the latency SLO"
    Params = GoodputParams

    def evaluate(self, ctx: CheckContext, params: GoodputParams, window: Window) -> CheckResult:
        return _per_second(
            self.name,
            ctx,
            params,
            window,
            counts=lambda r: r.ok and _meets(r, params),
            counted="met the SLO",
        )


def _per_second(
    check: str,
    ctx: CheckContext,
    params: ThroughputParams | GoodputParams,
    window: Window,
    *,
    counts: Callable[[RequestRecord], bool],
    counted: str = "",
) -> CheckResult:
    """Tokens (or requests) a second of the requests ``counts`` keeps; ``n`` is every request.

    A rate needs a long enough window and a load that ran; otherwise it says which is missing.
    ``counted`` words the kept requests in the message (``12 of 40 requests met the SLO``).
    """
    label = f"{check} {params.unit}/s"
    if window.length < params.min_window:
        return insufficient(check, label, window, n=0, need=1, what="seconds of window")
    if not ctx.observations.requests:
        return unjudged(
            check,
            label,
            window,
            Verdict.INSUFFICIENT,
            "no load ran in this run: nothing to measure",
        )
    rs = requests_in(ctx, window, params.request, params.model)
    kept = [r for r in rs if counts(r)]
    amount = sum(r.tokens for r in kept) if params.unit == "tokens" else len(kept)
    unit = " tok/s" if params.unit == "tokens" else " req/s"
    return judged(
        check,
        label,
        window,
        amount / window.length,
        bounds=params,
        fmt=Rate(unit),
        n=len(rs),
        message=f"{len(kept)} of {len(rs)} requests {counted}" if counted else "",
    )


def _meets(r: RequestRecord, p: GoodputParams) -> bool:
    if p.slo_e2e is not None and r.duration > p.slo_e2e:
        return False
    if p.slo_ttft is not None and (r.ttft is None or r.ttft > p.slo_ttft):
        return False
    return not (p.slo_itl is not None and r.itl and max(r.itl) > p.slo_itl)


# ---------------------------------------------------------------- fallback_rate, degraded_reason


class FallbackRateParams(ShareBounds):
    reasons: tuple[str, ...] = Field(
        default=("*",), description="degraded reasons that are fallbacks (globs)"
    )
    models: tuple[str, ...] = Field(default=(), description="models that answer only as a fallback")
    request: str | None = None
    min_samples: int = Field(default=10, ge=1)


class FallbackRate(Check[FallbackRateParams]):
    """Share of requests answered (ok) by a fallback: a degraded reason or a fallback model."""

    name: ClassVar[str] = "fallback_rate"
    summary: ClassVar[str] = "share of requests served (ok) by a fallback path"
    Params = FallbackRateParams

    def evaluate(
        self, ctx: CheckContext, params: FallbackRateParams, window: Window
    ) -> CheckResult:
        rs = requests_in(ctx, window, params.request)
        if len(rs) < params.min_samples:
            return insufficient(
                self.name, self.name, window, n=len(rs), need=params.min_samples, what="requests"
            )
        served = [
            r
            for r in rs
            if r.ok
            and (
                (r.degraded and any(matches(x, params.reasons) for x in r.reasons or ("",)))
                or (params.models and matches(r.model, params.models))
            )
        ]
        return judged(
            self.name, self.name, window, len(served) / len(rs), bounds=params, fmt=Pct(), n=len(rs)
        )


class DegradedReasonParams(ShareBounds):
    reason: str = Field(description="a degraded reason, or a glob such as 'tool_*'")
    request: str | None = None
    min_samples: int = Field(default=10, ge=1)


class DegradedReason(Check[DegradedReasonParams]):
    """Share of requests that carry a given degraded reason."""

    name: ClassVar[str] = "degraded_reason"
    summary: ClassVar[str] = "share of requests degraded for a given reason"
    Params = DegradedReasonParams

    def evaluate(
        self, ctx: CheckContext, params: DegradedReasonParams, window: Window
    ) -> CheckResult:
        label = f"degraded_reason {params.reason}"
        rs = requests_in(ctx, window, params.request)
        if len(rs) < params.min_samples:
            return insufficient(
                self.name, label, window, n=len(rs), need=params.min_samples, what="requests"
            )
        hit = sum(1 for r in rs if any(matches(x, (params.reason,)) for x in r.reasons))
        return judged(self.name, label, window, hit / len(rs), bounds=params, fmt=Pct(), n=len(rs))


# ---------------------------------------------------------------- recovery_time


class RecoveryTimeParams(Params):
    max_: Duration = Field(alias="max", description="from the fault's revert to steady state")
    fault: str | None = Field(default=None, description="default: the window's fault (after: X)")
    hold: Duration = Field(default=5.0, description="steady state must hold this long")
    interval: Duration = Field(default=1.0, description="resolution of the judgement")
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    latency_metric: Literal["e2e", "ttft"] = "e2e"
    latency_percentile: float = Field(default=99.0, gt=0, le=100)
    max_latency: Duration | None = None
    min_requests: int = Field(default=1, ge=1, description="per interval; fewer = not steady")


class RecoveryTime(Check[RecoveryTimeParams]):
    """Time from a fault's revert until every interval for ``hold`` seconds is steady again."""

    name: ClassVar[str] = "recovery_time"
    summary: ClassVar[str] = "time from the fault's revert until steady state held for N s"
    Params = RecoveryTimeParams

    def evaluate(
        self, ctx: CheckContext, params: RecoveryTimeParams, window: Window
    ) -> CheckResult:
        fault = params.fault or window.fault
        label = f"recovery_time {fault}" if fault else "recovery_time"
        if not fault:
            return no_fault(self.name, label, window, "use `after: <fault>` or `fault: <name>`")
        _, reverted = ctx.fault_times(fault)
        if math.isinf(reverted):
            return unjudged(
                self.name,
                label,
                window,
                Verdict.INSUFFICIENT,
                f"fault {fault!r} was never reverted",
            )
        end = window.end
        if end - reverted < params.hold:
            return insufficient(
                self.name,
                label,
                window,
                n=0,
                need=1,
                what=f"seconds after the revert (need {params.hold:g}s to see it hold)",
            )
        rs = [r for r in ctx.observations.requests_between(reverted, end) if r.name != "task"]
        steady = [
            self._steady(b.records, params)
            for b in bins(rs, interval=params.interval, start=reverted, end=end)
        ]
        need = max(1, math.ceil(params.hold / params.interval - 1e-9))
        run = 0
        for k, ok in enumerate(steady):
            run = run + 1 if ok else 0
            if run >= need:
                took = (k + 1 - need) * params.interval
                return judged(
                    self.name,
                    label,
                    window,
                    took,
                    bounds=Limits(max_=params.max_),
                    fmt=Secs(),
                    n=len(rs),
                )
        return CheckResult(
            self.name,
            label,
            window.label,
            Verdict.FAILED,
            expected=f"≤ {Secs()(params.max_)}",
            observed="not recovered",
            n=len(rs),
            message=f"steady state never held {params.hold:g}s after the revert",
        )

    @staticmethod
    def _steady(rs: tuple[RequestRecord, ...], p: RecoveryTimeParams) -> bool:
        if len(rs) < p.min_requests:
            return False
        if sum(1 for r in rs if not r.ok) / len(rs) > p.max_error_rate:
            return False
        if p.max_latency is None:
            return True
        values = metric_values(rs, p.latency_metric)
        return bool(values) and within(
            percentile(values, p.latency_percentile), None, p.max_latency
        )
