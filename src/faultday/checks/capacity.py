"""Capacity under a step load: per-step rate and P99, the P99 knee, the best rate within SLA."""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from faultday.checks.base import Check, CheckContext
from faultday.checks.common import Params, Pct, Rate, Secs, done_at
from faultday.core.loadconfig import Shape, ShapeSpec, users_at
from faultday.core.records import RequestRecord, percentile
from faultday.core.types import Duration
from faultday.core.windows import CheckResult, Verdict, Window

log = logging.getLogger(__name__)


class CapacityParams(Params):
    slo_p99: Duration = Field(description="a step meets the SLA when its e2e P99 is within this")
    max_error_rate: float = Field(default=0.01, ge=0, le=1, description="and its error rate ≤ this")
    min_throughput: float | None = Field(
        default=None, ge=0, description="the verdict: the best rate within SLA reaches this"
    )
    unit: Literal["requests", "tokens"] = Field(
        default="requests", description="unit of min_throughput and of the best rate reported"
    )
    knee_factor: float = Field(
        default=2.0, gt=1, description="knee: first step whose P99 exceeds this × the lowest before"
    )
    settle: Duration | None = Field(
        default=None, description="skipped at each step's start; default 10% of step_every"
    )
    request: str | None = Field(default=None, description="only requests whose name matches (glob)")
    min_samples: int = Field(default=10, ge=1, description="requests a step needs to be judged")
    min_steps: int = Field(default=2, ge=2, description="judged steps needed, else insufficient")


@dataclass(frozen=True, slots=True)
class Step:
    """One load step as measured. Rates are per real second, whatever the time scale."""

    index: int  # 1-based, in load order
    users: int
    start: float  # scenario seconds, after settling
    end: float
    requests: int
    ok: int
    rps: float
    tokens_per_s: float
    p99: float | None  # None: too few requests to judge the step
    error_rate: float
    meets_sla: bool

    def rate(self, unit: str) -> float:
        return self.tokens_per_s if unit == "tokens" else self.rps


@dataclass(frozen=True, slots=True)
class StepSpan:
    users: int
    start: float
    end: float


def step_spans(shape: ShapeSpec, *, duration: float, start: float, end: float) -> list[StepSpan]:
    """The load's steps inside [start, end) (scenario seconds); capped steps merge into one."""
    every = shape.step_every or max(duration / 4, 1e-3)
    spans: list[StepSpan] = []
    k = 0
    # Bounded: one span per step_every across the scenario (plus one).
    while k * every < min(end, duration) and k <= int(duration / every) + 1:
        lo, hi = max(start, k * every), min(end, (k + 1) * every)
        users = users_at(shape, k * every, duration=duration)
        k += 1
        if hi <= lo:
            continue
        if spans and spans[-1].users == users and spans[-1].end >= lo:
            spans[-1] = StepSpan(users, spans[-1].start, hi)
        else:
            spans.append(StepSpan(users, lo, hi))
    return spans


def step_records(ctx: CheckContext, window: Window, pattern: str | None) -> list[RequestRecord]:
    """Requests that completed inside the window, sent before it or not (agent tasks excluded)."""
    records = ctx.observations.requests_between(float("-inf"), window.end)
    scale = ctx.time_scale
    return [
        r
        for r in records
        if window.start <= done_at(r, scale) < window.end
        and (r.name != "task" if pattern is None else fnmatch.fnmatchcase(r.name, pattern))
    ]


def measure(
    records: list[RequestRecord], span: StepSpan, *, index: int, p: CapacityParams, scale: float
) -> Step:
    rs = [r for r in records if span.start <= done_at(r, scale) < span.end]
    ok = [r for r in rs if r.ok]
    real = max(span.end - span.start, 1e-9) * scale
    p99 = percentile([r.duration for r in rs], 99) if len(rs) >= p.min_samples else None
    errors = (len(rs) - len(ok)) / len(rs) if rs else 0.0
    meets = p99 is not None and p99 <= p.slo_p99 and errors <= p.max_error_rate
    return Step(
        index=index,
        users=span.users,
        start=round(span.start, 6),
        end=round(span.end, 6),
        requests=len(rs),
        ok=len(ok),
        rps=len(ok) / real,
        tokens_per_s=sum(r.tokens for r in ok) / real,
        p99=p99,
        error_rate=errors,
        meets_sla=meets,
    )


def find_knee(steps: list[Step], factor: float) -> Step | None:
    """First judged step from which P99 stays above ``factor`` × the lowest judged P99 before it.

    "Stays": every later judged step is above that line too; under a growing load a
    P99 that falls back below it was one slow request, not saturation.
    """
    judged = [s for s in steps if s.p99 is not None]
    for i in range(1, len(judged)):
        line = factor * min(s.p99 for s in judged[:i] if s.p99 is not None)
        if all(s.p99 is not None and s.p99 > line for s in judged[i:]):
            return judged[i]
    return None


def best_within_sla(steps: list[Step], unit: str) -> Step | None:
    """The highest rate among the judged steps within SLA before the first that breaks it.

    A step that happens to meet the SLA after a lighter step broke it is luck, not
    capacity: the load only grows.
    """
    ok: list[Step] = []
    for s in steps:
        if s.p99 is None:
            continue
        if not s.meets_sla:
            break
        ok.append(s)
    return max(ok, key=lambda s: (s.rate(unit), -s.index)) if ok else None


def table_text(steps: list[Step]) -> str:
    """One line: ``1) 4u 20.1 req/s 410 tok/s p99 0.21s err 0% ok; 2) …``."""
    parts = []
    for s in steps:
        p99 = Secs()(s.p99) if s.p99 is not None else f"n/a (n={s.requests})"
        tok = f" {s.tokens_per_s:.4g} tok/s" if s.tokens_per_s else ""
        mark = "ok" if s.meets_sla else "over SLA" if s.p99 is not None else "not judged"
        err = Pct()(s.error_rate)
        parts.append(f"{s.index}) {s.users}u {s.rps:.4g} req/s{tok} p99 {p99} err {err} {mark}")
    return "; ".join(parts)


class Capacity(Check[CapacityParams]):
    """Per-step rate, P99 and errors under a step load; the P99 knee, the best rate within SLA."""

    name: ClassVar[str] = "capacity"
    summary: ClassVar[str] = "step load: P99 knee and highest throughput within the SLA"
    Params = CapacityParams

    def evaluate(self, ctx: CheckContext, params: CapacityParams, window: Window) -> CheckResult:
        p = params
        label = f"capacity {p.unit}/s within SLA (p99 ≤ {Secs()(p.slo_p99)})"
        spec = ctx.plan.scenario.spec
        if str(spec.load.shape) != Shape.STEP:
            return CheckResult(
                self.name,
                label,
                window.label,
                Verdict.ERROR,
                message=f"needs a step load (load.shape: step), not {spec.load.shape}",
            )
        shape = ShapeSpec(
            kind=Shape.STEP,
            users=spec.load.users,
            spawn_rate=spec.load.spawn_rate,
            step_users=spec.load.step_users,
            step_every=spec.load.step_every,
        )
        every = shape.step_every or max(spec.duration / 4, 1e-3)
        settle = p.settle if p.settle is not None else 0.1 * every
        spans = [
            StepSpan(s.users, min(s.start + settle, s.end), s.end)
            for s in step_spans(shape, duration=spec.duration, start=window.start, end=window.end)
        ]
        records = step_records(ctx, window, p.request)
        steps = [
            measure(records, s, index=i + 1, p=p, scale=ctx.time_scale) for i, s in enumerate(spans)
        ]
        judged_steps = [s for s in steps if s.p99 is not None]
        table = table_text(steps)
        if len(judged_steps) < p.min_steps:
            return CheckResult(
                self.name,
                label,
                window.label,
                Verdict.INSUFFICIENT,
                n=len(records),
                message=(
                    f"too few steps with ≥ {p.min_samples} requests to judge: "
                    f"{len(judged_steps)} of {len(steps)}, need at least {p.min_steps}"
                    + (f"; steps: {table}" if table else "")
                ),
            )
        knee = find_knee(steps, p.knee_factor)
        best = best_within_sla(steps, p.unit)
        fmt = Rate(" tok/s" if p.unit == "tokens" else " req/s")
        observed = _observed(knee, best, p.unit, fmt, top=max(s.users for s in steps))
        sla = f"p99 ≤ {Secs()(p.slo_p99)}, errors ≤ {Pct()(p.max_error_rate)}"
        if p.min_throughput is not None:
            expected = f"≥ {fmt(p.min_throughput)} within SLA ({sla})"
            passed = best is not None and best.rate(p.unit) >= p.min_throughput
        else:
            expected = f"a step within SLA ({sla})"
            passed = best is not None
        message = f"steps: {table}"
        written = self._write_table(ctx, window=window, p=p, steps=steps, knee=knee, best=best)
        if written:
            message += f"; table: {written}"
        return CheckResult(
            self.name,
            label,
            window.label,
            Verdict.PASSED if passed else Verdict.FAILED,
            expected,
            observed,
            n=len(records),
            message=message,
        )

    @staticmethod
    def _write_table(
        ctx: CheckContext,
        *,
        window: Window,
        p: CapacityParams,
        steps: list[Step],
        knee: Step | None,
        best: Step | None,
    ) -> str:
        """Write the per-step table as JSON in the run folder; returns its name, or ''."""
        run_dir: Path | None = getattr(ctx, "run_dir", None)
        if run_dir is None:
            return ""
        slug = re.sub(r"[^a-z0-9]+", "-", window.label.lower()).strip("-") or "run"
        path = run_dir / f"capacity-{slug}.json"
        doc = {
            "version": 1,
            "window": window.label,
            "slo_p99": p.slo_p99,
            "max_error_rate": p.max_error_rate,
            "knee_factor": p.knee_factor,
            "rates": "per real second",
            "knee_step": knee.index if knee else None,
            "best_step": best.index if best else None,
            "steps": [asdict(s) for s in steps],
        }
        try:
            path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        except OSError:
            # Never swallowed: logged at ERROR; the verdict does not depend on the file.
            log.exception("capacity: could not write %s", path)
            return ""
        return path.name


def _observed(knee: Step | None, best: Step | None, unit: str, fmt: Rate, *, top: int) -> str:
    if knee is not None and knee.p99 is not None:
        k = f"knee at step {knee.index} ({knee.users} users, p99 {Secs()(knee.p99)})"
    else:
        k = f"no knee up to {top} users"
    if best is None:
        return f"{k}; no step within SLA"
    return f"{k}; {fmt(best.rate(unit))} max within SLA (step {best.index}, {best.users} users)"
