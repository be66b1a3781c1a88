"""Synthetic traces for the analysis tests: spans on a millisecond grid from the run's t=0."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from faultday.core.journal import JournalWindow
from faultday.core.records import RequestRecord
from faultday.core.spans import AttrValue, Span, SpanKind, SpanStatus
from faultday.core.vocab import WindowKind

ROOT_NAME = "POST /v1/chat"
T0_WALL = 1_800_000_000.0  # the run's t=0, Unix seconds
_ids = itertools.count(1)


def span_id() -> str:
    return f"{next(_ids):016x}"


def trace_id(n: int) -> str:
    return f"{n:032x}"


def ns(run_seconds: float) -> int:
    """Unix nanoseconds of a run time (time scale 1)."""
    return round((T0_WALL + run_seconds) * 1e9)


@dataclass
class TraceBuilder:
    """Spans of one trace; times in milliseconds from the request's start ``t`` (run seconds)."""

    trace: str
    t: float
    spans: list[Span] = field(default_factory=list)

    def add(
        self,
        service: str,
        name: str,
        start_ms: float,
        end_ms: float,
        *,
        parent: Span | None = None,
        parent_id: str = "",
        kind: SpanKind = SpanKind.INTERNAL,
        status: SpanStatus = SpanStatus.UNSET,
        message: str = "",
        attrs: Mapping[str, AttrValue] | None = None,
    ) -> Span:
        s = Span(
            trace_id=self.trace,
            span_id=span_id(),
            parent_id=parent.span_id if parent else parent_id,
            service=service,
            name=name,
            start_ns=ns(self.t + start_ms / 1000),
            end_ns=ns(self.t + end_ms / 1000),
            kind=kind,
            status=status,
            status_message=message,
            attributes=dict(attrs or {}),
        )
        self.spans.append(s)
        return s

    def root(
        self, end_ms: float, *, start_ms: float = 0, status: SpanStatus = SpanStatus.UNSET
    ) -> Span:
        """The agent's SERVER span; its parent, the load's traceparent id, is not stored."""
        return self.add(
            "agent",
            ROOT_NAME,
            start_ms,
            end_ms,
            parent_id="00f067aa0ba902b7",
            kind=SpanKind.SERVER,
            status=status,
        )


def request(
    trace: str,
    t: float,
    duration: float,
    *,
    ok: bool = True,
    status: int = 200,
    degraded: bool = False,
) -> RequestRecord:
    return RequestRecord(
        t=t, duration=duration, ok=ok, status=status, degraded=degraded, trace_id=trace
    )


def window(
    kind: WindowKind, label: str, start: float, end: float, fault: str = ""
) -> JournalWindow:
    return JournalWindow(kind=kind, label=label, start=start, end=end, fault=fault)
