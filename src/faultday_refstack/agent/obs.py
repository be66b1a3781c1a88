"""Metrics (Prometheus, one registry per runtime) and traces (OpenTelemetry: OTLP, JSONL)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from faultday_refstack.otel import tracer_provider
from faultday_wire.metrics import (
    AGENT_BREAKER_STATE,
    AGENT_BREAKER_TRANSITIONS,
    AGENT_PREFIX,
    AGENT_TOOL_CALLS,
)

PREFIX = AGENT_PREFIX  # the names the harness's checks read are in faultday_wire.metrics
SERVICE = "agent"  # service.name unless OTEL_SERVICE_NAME says otherwise


class Metrics:
    """Every metric the runtime exports on /metrics (names listed in the module docs)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            f"{PREFIX}_requests", "Requests by route and status", ["route", "status"], registry=r
        )
        self.request_seconds = Histogram(
            f"{PREFIX}_request_seconds", "Request latency", ["route"], registry=r
        )
        self.degraded = Counter(
            f"{PREFIX}_degraded", "Degraded responses by reason", ["reason"], registry=r
        )
        self.breaker_state = Gauge(
            AGENT_BREAKER_STATE,
            "Breaker per dependency: 0 closed, 1 half-open, 2 open",
            ["dependency"],
            registry=r,
        )
        # The gauge shows a half-open probe only while it runs (milliseconds), which a
        # scrape rarely catches; this counter keeps every transition for the checks.
        self.breaker_transitions = Counter(
            AGENT_BREAKER_TRANSITIONS,
            "Breaker state changes per dependency (half-opened counts each probe)",
            ["dependency", "state"],
            registry=r,
        )
        self.dep_calls = Counter(
            f"{PREFIX}_dependency_calls",
            "Dependency calls by result (after retries)",
            ["dependency", "result"],
            registry=r,
        )
        self.attempts = Counter(
            f"{PREFIX}_dependency_attempts",
            "Attempts that reached a dependency (retries included, breaker rejections not)",
            ["dependency"],
            registry=r,
        )
        self.retries = Counter(
            f"{PREFIX}_retries", "Retries scheduled per dependency", ["dependency"], registry=r
        )
        self.retry_budget_exhausted = Counter(
            f"{PREFIX}_retry_budget_exhausted",
            "Retries refused by the retry budget",
            ["dependency"],
            registry=r,
        )
        self.fallbacks = Counter(
            f"{PREFIX}_fallbacks",
            "Fallback hops by capability and the step that served",
            ["capability", "to"],
            registry=r,
        )
        self.tool_calls = Counter(
            AGENT_TOOL_CALLS, "Tool calls by tool and result", ["tool", "result"], registry=r
        )
        self.tasks = Counter(
            f"{PREFIX}_task_transitions", "Task state transitions", ["state"], registry=r
        )
        self.tasks_active = Gauge(f"{PREFIX}_tasks_active", "Tasks being worked on", registry=r)
        self.checkpoints = Counter(
            f"{PREFIX}_checkpoints", "Checkpoint writes by result", ["result"], registry=r
        )
        self.resumes = Counter(f"{PREFIX}_task_resumes", "Tasks resumed at start", registry=r)
        self.queue_depth = Gauge(
            f"{PREFIX}_queue_depth", "Queue depth (gateway, tasks)", ["queue"], registry=r
        )
        self.in_flight = Gauge(f"{PREFIX}_in_flight", "Requests admitted and running", registry=r)
        self.rejected = Counter(
            f"{PREFIX}_admission_rejected", "Requests answered 429 at the gateway", registry=r
        )
        self.retrieval_hits = Histogram(
            f"{PREFIX}_retrieval_hits",
            "Hits returned by the vector search (recall proxy)",
            buckets=(0, 1, 2, 3, 5, 10),
            registry=r,
        )
        self.model_requests = Counter(
            f"{PREFIX}_model_requests",
            "Chat answers by the model (version) that answered; canned = no model",
            ["model"],
            registry=r,
        )
        self.completion_tokens = Counter(
            f"{PREFIX}_completion_tokens",
            "Completion tokens by the model that produced them (usage reported by the LLM)",
            ["model"],
            registry=r,
        )
        self.completion_tokens_per_request = Histogram(
            f"{PREFIX}_completion_tokens_per_request",
            "Completion tokens of one chat answer, by model",
            ["model"],
            buckets=(8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048),
            registry=r,
        )
        self.canary_share = Gauge(
            f"{PREFIX}_canary_share", "Share of chat requests routed to the canary", registry=r
        )
        for dep in ("llm-primary", "llm-backup", "redis", "embedder", "vector", "tools"):
            self.breaker_state.labels(dep).set(0)


class JsonlSpanExporter(SpanExporter):
    """Append one JSON object per finished span to a file the harness reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(_span_dict(s), separators=(",", ":")) for s in spans]
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _span_dict(s: ReadableSpan) -> dict[str, object]:
    ctx = s.get_span_context()
    parent = s.parent
    return {
        "trace_id": f"{ctx.trace_id:032x}" if ctx else "",
        "span_id": f"{ctx.span_id:016x}" if ctx else "",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "name": s.name,
        "start_ns": s.start_time,
        "end_ns": s.end_time,
        "status": s.status.status_code.name,
        "attributes": dict(s.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events],
    }


def make_tracer_provider(*, jsonl: Path | None) -> TracerProvider:
    """The agent's provider (not the global one): OTLP when configured, plus the JSONL file.

    With neither, a provider that records nothing (ALWAYS_OFF) but still makes trace
    ids: every answer carries one, and the canary split keys on it.
    """
    extra = (
        [BatchSpanProcessor(JsonlSpanExporter(jsonl), schedule_delay_millis=250)]
        if jsonl is not None
        else []
    )
    provider = tracer_provider(default_service=SERVICE, extra=extra)
    return provider if provider is not None else TracerProvider(sampler=ALWAYS_OFF)
