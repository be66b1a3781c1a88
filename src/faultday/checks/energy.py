"""tokens_per_joule: generated tokens per joule of GPU energy, absolute or against baseline.

Energy is dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ, a counter)
scraped from each replica's ``/metrics``; tokens are ``vllm:generation_tokens_total``
on the same replicas. ``goodput: true`` counts only the share of tokens that
belong to requests served ok, undegraded and within the latency SLO given
(the load's request records), so the figure is goodput per joule.
"""

from __future__ import annotations

import fnmatch
from typing import ClassVar

from pydantic import Field, model_validator

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import (
    Fmt,
    Limits,
    Params,
    Times,
    counter_increase,
    insufficient,
    judged,
    requests_in,
    unjudged,
)
from faultday.checks.metrics import baseline_window
from faultday.core.records import RequestRecord
from faultday.core.types import Duration
from faultday.core.windows import CheckResult, Verdict, Window

# The names dcgm-exporter and vLLM give them (the simulator serves the same). dcgm-exporter
# exposes its counters without "_total"; the scrape's parser appends it to every counter.
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot
GEN_TOKENS = "vllm:generation_tokens_total"


def _name(ctx: CheckContext, name: str) -> str:
    """The name the run's samples carry: as exposed, or with the parser's ``_total``."""
    if ctx.observations.samples_between(name, float("-inf"), float("inf")):
        return name
    return name + "_total"


class TokensPerJouleParams(Params):
    min_: float | None = Field(default=None, alias="min", gt=0, description="tokens per joule")
    ratio_min: float | None = Field(
        default=None, gt=0, description="the window's tokens/J ÷ the baseline's, at least"
    )
    target: str = Field(default="*", description="replicas whose GPUs count (component glob)")
    goodput: bool = Field(
        default=False, description="count only tokens of requests that met the SLO"
    )
    slo_e2e: Duration | None = Field(default=None, description="with goodput: e2e at most")
    slo_ttft: Duration | None = Field(default=None, description="with goodput: TTFT at most")
    min_joules: float = Field(default=1.0, gt=0, description="less energy than this: too little")

    @model_validator(mode="after")
    def _one_bound(self) -> TokensPerJouleParams:
        if self.min_ is None and self.ratio_min is None:
            raise ValueError("give min (tokens per joule), ratio_min (to baseline) or both")
        return self


def _replicas(ctx: CheckContext, pattern: str) -> list[str]:
    names = {
        dict(s.labels).get("component", "")
        for s in ctx.observations.samples_between(_name(ctx, ENERGY), float("-inf"), float("inf"))
    }
    return sorted(n for n in names if n and fnmatch.fnmatchcase(n, pattern))


def _meets(r: RequestRecord, p: TokensPerJouleParams) -> bool:
    if not r.ok or r.degraded:
        return False
    if p.slo_e2e is not None and r.duration > p.slo_e2e:
        return False
    return not (p.slo_ttft is not None and (r.ttft is None or r.ttft > p.slo_ttft))


def _good_share(records: list[RequestRecord], p: TokensPerJouleParams) -> float | None:
    """Share of the client's tokens (requests when none carry tokens) that met the SLO."""
    if not records:
        return None
    by_tokens = any(r.tokens for r in records)

    def weight(r: RequestRecord) -> float:
        return float(r.tokens) if by_tokens else 1.0

    total = sum(weight(r) for r in records)
    return sum(weight(r) for r in records if _meets(r, p)) / total if total else None


def _tokens_per_joule(
    ctx: CheckContext, p: TokensPerJouleParams, window: Window, replicas: list[str]
) -> tuple[float | None, float, float]:
    """(tokens/J or None when too little energy, tokens, joules) over the replicas."""
    tokens = joules = 0.0
    energy = _name(ctx, ENERGY)
    for c in replicas:
        joules += counter_increase(ctx, energy, window, {"component": c})[0] / 1e3
        tokens += counter_increase(ctx, GEN_TOKENS, window, {"component": c})[0]
    if p.goodput:
        share = _good_share(requests_in(ctx, window), p)
        tokens = tokens * share if share is not None else 0.0
    if joules < p.min_joules:
        return None, tokens, joules
    return tokens / joules, tokens, joules


class TokensPerJoule(Check[TokensPerJouleParams]):
    """Generated (or good) tokens per joule of the replicas' GPUs in the window."""

    name: ClassVar[str] = "tokens_per_joule"
    summary: ClassVar[str] = "tokens (or goodput) per joule of GPU energy, or its ratio to baseline"
    Params = TokensPerJouleParams

    def evaluate(
        self, ctx: CheckContext, params: TokensPerJouleParams, window: Window
    ) -> CheckResult:
        what = "goodput" if params.goodput else "tokens"
        label = f"tokens_per_joule {what} {params.target}"
        replicas = _replicas(ctx, params.target)
        if not replicas:
            return unjudged(
                self.name,
                label,
                window,
                Verdict.INSUFFICIENT,
                f"no {ENERGY} scraped from a component matching {params.target!r}",
            )
        value, tokens, joules = _tokens_per_joule(ctx, params, window, replicas)
        if value is None:
            return insufficient(
                self.name,
                label,
                window,
                n=round(joules),
                need=round(params.min_joules),
                what="joules",
            )
        seen = f"{tokens:.0f} tokens / {joules:.4g} J on {', '.join(replicas)}"
        if params.ratio_min is None:
            return _judge(
                self.name, label, window, value, lo=params.min_, seen=seen, n=round(tokens)
            )
        return self._ratio(ctx, params, window, replicas, value=value, seen=seen, label=label)

    def _ratio(
        self,
        ctx: CheckContext,
        params: TokensPerJouleParams,
        window: Window,
        replicas: list[str],
        *,
        value: float,
        seen: str,
        label: str,
    ) -> CheckResult:
        base_w = baseline_window(ctx)
        base = _tokens_per_joule(ctx, params, base_w, replicas)[0] if base_w else None
        if base is None or base <= 0:
            return unjudged(
                self.name,
                label,
                window,
                Verdict.INSUFFICIENT,
                "no baseline tokens per joule to compare with",
            )
        if params.min_ is not None and value < params.min_:
            return _judge(self.name, label, window, value, lo=params.min_, seen=seen, n=1)
        return judged(
            self.name,
            label + " vs baseline",
            window,
            value / base,
            bounds=Limits(min_=params.ratio_min),
            fmt=Times(),
            n=1,
            message=f"{value:.4g} tok/J vs {base:.4g} tok/J in baseline ({seen})",
        )


def _judge(
    check: str, label: str, window: Window, value: float, *, lo: float | None, seen: str, n: int
) -> CheckResult:
    return judged(
        check, label, window, value, bounds=Limits(min_=lo), fmt=_PerJ(), n=n, message=seen
    )


class _PerJ(Fmt):
    def __call__(self, v: float) -> str:
        return f"{v:.4g} tok/J"
