"""``traces.json``: what a run's distributed traces say, per window and per hop.

The analysis (``observe/trace_analysis.py``) writes it from the run's spans
(``traces.db``), its windows and its client requests; the report reads it back.
How each figure is computed: docs/traces-analysis.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultday.errors import UsageError

__all__ = [
    "SPANS_DB_NAME",
    "TRACES_NAME",
    "TRACES_VERSION",
    "Exemplar",
    "ExemplarKind",
    "HopStats",
    "Mover",
    "TopHop",
    "TracesSummary",
    "WaterfallSpan",
    "WindowTraces",
    "read_traces",
    "write_traces",
]

TRACES_NAME = "traces.json"  # in the run folder; journal.artifacts["traces"] = TRACES_NAME
SPANS_DB_NAME = "traces.db"  # the run's spans (SQLite)
TRACES_VERSION = 1

# The exemplar requests a summary quotes, with their trace's waterfall.
ExemplarKind = Literal["slowest_ok", "failed", "degraded"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HopStats(_M):
    """One hop (service and span name) over one window's traced requests."""

    hop: str = Field(
        description="service/span name; a vLLM llm_request is split into the pseudo-hops"
        " service/llm_request queue, …/llm_request prefill, …/llm_request decode"
    )
    service: str
    span: str
    count: int
    errors: int
    error_share: float = Field(description="0..1")
    p50_s: float
    p99_s: float
    time_s: float = Field(
        description="critical-path self time summed over the window's traced requests"
    )
    share: float = Field(
        description="time_s / e2e_s of the window (0..1); a window's shares sum to ~1"
    )
    faults: list[str] = Field(
        default_factory=list, description="toxics seen on this hop's proxied calls"
    )
    retries: int = Field(
        default=0, description="spans of this hop that were a retry (retry.attempt >= 2)"
    )


class TopHop(_M):
    service: str
    span: str
    share: float


class Mover(_M):
    """The hop whose share rose most against the baseline."""

    service: str
    span: str
    share: float
    baseline_share: float
    p99_s: float
    baseline_p99_s: float | None


class WindowTraces(_M):
    label: str = Field(description="the window's label in the journal")
    kind: str = Field(description="the journal window kind (WindowKind value)")
    fault: str | None = None
    t0: float = Field(description="run seconds")
    t1: float
    requests: int = Field(description="client requests that started in the window")
    traced: int = Field(description="of them, with spans")
    e2e_s: float = Field(description="their end-to-end time summed (client side)")
    hops: list[HopStats] = Field(description="by share, largest first; includes client/network")
    top: TopHop | None
    mover: Mover | None = Field(description="None for the baseline itself or when nothing rose")


class WaterfallSpan(_M):
    span_id: str
    parent_id: str
    service: str
    name: str
    start_s: float = Field(description="offset from the trace's first span")
    duration_s: float
    status: str = Field(description="SpanStatus value")
    depth: int
    note: str = Field(default="", description="model, retry attempt, toxic, error message")


class Exemplar(_M):
    kind: ExemplarKind
    trace_id: str
    window: str
    t: float = Field(description="run seconds the request started")
    duration_s: float = Field(description="client side")
    status: int = Field(description="HTTP status (0 = none)")
    spans: list[WaterfallSpan] = Field(description="depth-first order, at most 200")
    truncated: int = Field(default=0, description="spans of the trace left out of `spans`")


class TracesSummary(_M):
    version: int = TRACES_VERSION
    spans: int = Field(description="spans kept for the run")
    traces: int
    dropped: int = Field(default=0, description="spans the collector dropped past its cap")
    rejected: int = Field(default=0, description="export bodies it refused (400/413/415)")
    requests: int = Field(description="client requests in the run")
    requests_traced: int = Field(description="that joined to spans by trace id")
    services: list[str]
    windows: list[WindowTraces]
    exemplars: list[Exemplar]
    note: str = Field(
        default="", description="why there is nothing to show and how to turn tracing on"
    )


def write_traces(run_dir: Path, summary: TracesSummary) -> Path:
    """Write ``traces.json`` atomically (temp file + rename), like the journal."""
    path = run_dir / TRACES_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(summary.model_dump_json(indent=2))
    os.replace(tmp, path)
    return path


def read_traces(run_dir: Path) -> TracesSummary | None:
    """The run's ``traces.json``; None when the file is absent, UsageError when it is invalid."""
    path = run_dir / TRACES_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return TracesSummary.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise UsageError(
            f"{path}: field {where}: {first['msg']} ({exc.error_count()} problem(s));"
            f" expected a traces.json of version {TRACES_VERSION}"
        ) from exc
