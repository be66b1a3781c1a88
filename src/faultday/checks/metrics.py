"""Checks over scraped metrics and task outcomes (metric, retry amplification, breaker, tasks)."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import (
    Bounds,
    Count,
    Fmt,
    Limits,
    Params,
    Rate,
    Secs,
    Times,
    counter_increase,
    from_problems,
    insufficient,
    judged,
    no_fault,
    requests_in,
    series,
    unjudged,
)
from faultday.core.protocols import PlanView
from faultday.core.records import RequestRecord
from faultday.core.types import Duration
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind
from faultday_wire.metrics import (
    AGENT_BREAKER_STATE,
    AGENT_BREAKER_TRANSITIONS,
    BREAKER_HALF_OPEN,
    total,
)

# ---------------------------------------------------------------- metric


class MetricParams(Bounds):
    metric: str = Field(description="a scraped sample name, e.g. faultday_agent_retries_total")
    labels: dict[str, str] = Field(default_factory=dict, description="must all match")
    target: str | None = Field(default=None, description="only this component")
    agg: Literal["last", "max", "min", "mean", "increase", "rate"] = "last"
    min_samples: int = Field(default=2, ge=1)


class Metric(Check[MetricParams]):
    """Any scraped metric's value (last/max/min/mean) or growth (increase, rate) in the window."""

    name: ClassVar[str] = "metric"
    summary: ClassVar[str] = "a scraped metric's value or rate against a threshold"
    Params = MetricParams

    def evaluate(self, ctx: CheckContext, params: MetricParams, window: Window) -> CheckResult:
        labels = dict(params.labels)
        if params.target:
            labels["component"] = params.target
        label = f"metric {params.agg}({params.metric}{_labels_text(params.labels)})"
        if params.agg in ("increase", "rate"):
            inc, n = counter_increase(ctx, params.metric, window, labels)
            if n < params.min_samples:
                return insufficient(
                    self.name, label, window, n=n, need=params.min_samples, what="scrapes"
                )
            value = inc / window.length if params.agg == "rate" and window.length else inc
            fmt = Rate() if params.agg == "rate" else Fmt()
            return judged(self.name, label, window, value, bounds=params, fmt=fmt, n=n)
        groups = series(ctx, params.metric, window, labels)
        n = sum(len(v) for v in groups.values())
        if n < params.min_samples:
            return insufficient(
                self.name, label, window, n=n, need=params.min_samples, what="scrapes"
            )
        # Several label sets (e.g. one per component) are summed at each scrape.
        per_t: dict[float, float] = {}
        for samples in groups.values():
            for s in samples:
                per_t[s.t] = per_t.get(s.t, 0.0) + s.value
        values = [per_t[t] for t in sorted(per_t)]
        value = {
            "last": values[-1],
            "max": max(values),
            "min": min(values),
            "mean": sum(values) / len(values),
        }[params.agg]
        return judged(self.name, label, window, value, bounds=params, fmt=Fmt(), n=n)


def _labels_text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else ""


# ---------------------------------------------------------------- retry_amplification

PROXY_REQUESTS = "faultday_proxy_http_requests_total"
PROXY_FAILED_DIALS = "faultday_proxy_upstream_failures_total"


class RetryAmplificationParams(Params):
    target: str = Field(description="an edge (agent->llm-primary) or its destination component")
    max_: float = Field(alias="max", gt=0, description="allowed ratio to baseline")
    metric: str = Field(default=PROXY_REQUESTS, description="downstream request counter")
    failed_dials: str | None = Field(
        default=PROXY_FAILED_DIALS,
        description="counter of attempts that never reached a dead upstream; added to the "
        "requests (null: requests only)",
    )
    label: str = Field(default="proxy", description="the label naming the edge in that metric")
    min_requests: int = Field(default=10, ge=1, description="client requests in each window")


class RetryAmplification(Check[RetryAmplificationParams]):
    """(downstream requests per client request in the window) ÷ (the same in baseline)."""

    name: ClassVar[str] = "retry_amplification"
    summary: ClassVar[str] = "downstream requests per client request, relative to baseline"
    Params = RetryAmplificationParams

    def evaluate(
        self, ctx: CheckContext, params: RetryAmplificationParams, window: Window
    ) -> CheckResult:
        label = f"retry_amplification {params.target}"
        baseline = baseline_window(ctx)
        if baseline is None:
            return unjudged(
                self.name,
                label,
                window,
                Verdict.ERROR,
                "the run has no baseline window (no faults?)",
            )
        edges = _edges_for(ctx, params)
        if not edges:
            return unjudged(
                self.name,
                label,
                window,
                Verdict.INSUFFICIENT,
                f"no scraped {params.metric} for {params.target!r}",
            )
        ratios = []
        for w in (baseline, window):
            clients = len(requests_in(ctx, w, every_send=True))  # as the proxy counts them
            down = sum(counter_increase(ctx, params.metric, w, {params.label: e})[0] for e in edges)
            if params.failed_dials:
                # Retries at a dead replica never become HTTP requests: count the dials too.
                down += sum(
                    counter_increase(ctx, params.failed_dials, w, {params.label: e})[0]
                    for e in edges
                )
            if clients < params.min_requests:
                return insufficient(
                    self.name,
                    label,
                    window,
                    n=clients,
                    need=params.min_requests,
                    what=f"client requests in {w.label}",
                )
            ratios.append(down / clients)
        base, now = ratios
        if base <= 0:
            return unjudged(
                self.name,
                label,
                window,
                Verdict.INSUFFICIENT,
                f"no downstream requests to {params.target} in baseline",
            )
        value = now / base
        return judged(
            self.name,
            label,
            window,
            value,
            bounds=Limits(max_=params.max_),
            fmt=Times(),
            n=len(requests_in(ctx, window, every_send=True)),
            message=f"{now:.3g} per request vs {base:.3g} in baseline",
        )


def _edges_for(ctx: CheckContext, p: RetryAmplificationParams) -> list[str]:
    names = {
        dict(s.labels).get(p.label, "")
        for s in ctx.observations.samples_between(p.metric, float("-inf"), float("inf"))
    }
    names.discard("")
    if p.target in names:
        return [p.target]
    # A component: every edge into it, whatever separator its proxy name uses.
    return sorted(
        n
        for n in names
        if n.replace("_to_", "->").split("->")[-1] == p.target or n.endswith(p.target)
    )


def baseline_window(ctx: CheckContext) -> Window | None:
    """The run's baseline window, where the context knows its plan (the engine's Run does)."""
    # Recorded contexts (tests, replays) may have no plan.
    plan: PlanView | None = getattr(ctx, "plan", None)
    if plan is None:
        return None
    try:
        return plan.window(WindowKind.BASELINE)
    except KeyError:
        return None


# ---------------------------------------------------------------- breaker

BREAKER_METRIC = AGENT_BREAKER_STATE  # 0 closed, 1 half-open, 2 open
BREAKER_TRANSITIONS = total(AGENT_BREAKER_TRANSITIONS)


class BreakerParams(Params):
    dependency: str = Field(description="the agent's dependency name, e.g. llm-primary")
    fault: str | None = Field(default=None, description="default: the window's fault")
    opened_within: Duration = Field(default=5.0, description="after the fault's start")
    half_open: bool = Field(default=True, description="a half-open probe must be seen")
    closed_within: Duration | None = Field(default=30.0, description="after the revert; null: skip")
    metric: str = BREAKER_METRIC
    target: str = Field(default="agent", description="component exporting the metric")


class Breaker(Check[BreakerParams]):
    """A breaker opened within T of the fault, probed half-open, closed after the revert."""

    name: ClassVar[str] = "breaker"
    summary: ClassVar[str] = "breaker opened within T, half-open probe, closed after recovery"
    Params = BreakerParams

    def evaluate(self, ctx: CheckContext, params: BreakerParams, window: Window) -> CheckResult:
        fault = params.fault or window.fault
        label = f"breaker {params.dependency}"
        if not fault:
            return no_fault(self.name, label, window, "`during:`/`after:` a fault, or `fault:`")
        start, reverted = ctx.fault_times(fault)
        states = ctx.observations.samples_between(
            params.metric,
            start,
            math.inf,
            labels={"dependency": params.dependency, "component": params.target},
        )
        states.sort(key=lambda s: s.t)
        if len(states) < 2:
            return insufficient(
                self.name, label, window, n=len(states), need=2, what="scrapes of the breaker state"
            )
        opened = next((s.t for s in states if s.value >= 2), math.inf)
        half = next((s.t for s in states if s.t > opened and s.value == 1), math.inf)
        if math.isinf(half) and not math.isinf(opened):
            # A probe lasts milliseconds: the transition counter keeps what scrapes miss.
            probes, _ = counter_increase(
                ctx,
                BREAKER_TRANSITIONS,
                Window(WindowKind.FAULT, "after opening", opened, math.inf),
                {"dependency": params.dependency, "state": BREAKER_HALF_OPEN},
            )
            if probes > 0:
                half = opened
        closed = next(
            (s.t for s in states if s.t >= reverted and s.t > opened and s.value == 0), math.inf
        )
        problems = []
        if opened - start > params.opened_within:
            problems.append(
                f"opened after {Secs()(opened - start)} (want ≤ {Secs()(params.opened_within)})"
            )
        if params.half_open and math.isinf(half):
            problems.append("no half-open probe seen")
        if params.closed_within is not None and closed - reverted > params.closed_within:
            problems.append(
                f"closed {Secs()(closed - reverted)} after the revert "
                f"(want ≤ {Secs()(params.closed_within)})"
            )
        observed = (
            f"open at +{Secs()(opened - start)}" if not math.isinf(opened) else "never opened"
        )
        if not math.isinf(closed):
            observed += f", closed {Secs()(closed - reverted)} after revert"
        expected = f"open ≤ {Secs()(params.opened_within)}" + (
            ", half-open" if params.half_open else ""
        )
        if params.closed_within is not None:
            expected += f", closed ≤ {Secs()(params.closed_within)} after revert"
        return from_problems(
            self.name, label, window, problems, expected=expected, observed=observed, n=len(states)
        )


# ---------------------------------------------------------------- tasks_lost


class TasksLostParams(Params):
    max_: int = Field(default=0, alias="max", ge=0)
    stuck_after: Duration = Field(default=120.0, description="a task unfinished this long is lost")
    min_tasks: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _positive(self) -> TasksLostParams:
        if self.stuck_after <= 0:
            raise ValueError("stuck_after must be positive")
        return self


class TasksLost(Check[TasksLostParams]):
    """Agent tasks accepted by the runtime that it later forgot (404) or never finished."""

    name: ClassVar[str] = "tasks_lost"
    summary: ClassVar[str] = "accepted agent tasks that were lost (must be 0)"
    Params = TasksLostParams

    def evaluate(self, ctx: CheckContext, params: TasksLostParams, window: Window) -> CheckResult:
        records = ctx.observations.requests_between(window.start, window.end)
        accepted = {r.task_id: r for r in records if r.name == "task.submit" and r.ok and r.task_id}
        everything = ctx.observations.requests_between(window.start, math.inf)
        outcome = {r.task_id: r for r in everything if r.name == "task" and r.task_id}
        if len(accepted) < params.min_tasks:
            return insufficient(
                self.name,
                self.name,
                window,
                n=len(accepted),
                need=params.min_tasks,
                what="accepted tasks",
            )
        last_seen = max((r.t + r.duration for r in everything), default=window.end)
        lost = []
        for tid, sub in accepted.items():
            out = outcome.get(tid)
            if _lost(out, waited=last_seen - sub.t, stuck_after=params.stuck_after):
                lost.append(tid)
        msg = f"lost: {', '.join(lost[:3])}" + (" …" if len(lost) > 3 else "") if lost else ""
        return judged(
            self.name,
            self.name,
            window,
            float(len(lost)),
            bounds=Limits(max_=params.max_),
            fmt=Count(),
            n=len(accepted),
            message=msg,
        )


def _lost(out: RequestRecord | None, *, waited: float, stuck_after: float) -> bool:
    """Forgotten by the runtime (404), or never finished within ``stuck_after``."""
    if out is None:
        return waited > stuck_after
    return out.task_state == "lost" or (
        out.task_state == "unfinished" and out.duration > stuck_after
    )
