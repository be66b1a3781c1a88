"""Spans as the OpenTelemetry SDK makes them, through OTLP and the span store, analysed.

The services' spans are made by the real SDK (a remote parent from the load's
``traceparent``, the proxy's span a sibling of the upstream's, a list attribute),
encoded by the real OTLP encoder, decoded by the collector's decoder and kept in the
run's span store: what the analysis reads in a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from tests.trace_analysis.builders import T0_WALL, ns, request, window

from faultday.core.otlp import CONTENT_PROTOBUF, decode
from faultday.core.spanstore import SpanStore
from faultday.core.traces import TRACES_NAME, read_traces
from faultday.core.vocab import WindowKind
from faultday.observe.trace_analysis import analyse, write_traces

pytestmark = pytest.mark.timeout(60)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"  # as the load sends it
PROP = TraceContextTextMapPropagator()


def _tracer(service: str, exporter: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider(resource=Resource({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("tests")


def _carrier(ctx: Context) -> dict[str, str]:
    carrier: dict[str, str] = {}
    PROP.inject(carrier, context=ctx)
    return carrier


def _services(t: float, exporter: InMemorySpanExporter) -> None:
    """One chat request at run time ``t``: agent → proxy → qdrant (slowed), agent → llm."""
    agent = _tracer("agent", exporter)
    proxy = _tracer("proxy", exporter)
    qdrant = _tracer("qdrant", exporter)

    def at(ms: float) -> int:
        return ns(t + ms / 1000)

    incoming = PROP.extract({"traceparent": TRACEPARENT})
    root = agent.start_span("POST /v1/chat", incoming, SpanKind.SERVER, start_time=at(0))
    in_root = set_span_in_context(root)
    call = agent.start_span("qdrant search", in_root, start_time=at(2))
    attempt = agent.start_span(
        "qdrant search attempt",
        set_span_in_context(call),
        SpanKind.CLIENT,
        attributes={"retry.attempt": 1, "retry.backoff_s": 0.0},
        start_time=at(3),
    )
    outgoing = PROP.extract(_carrier(set_span_in_context(attempt)))
    relay = proxy.start_span(
        "proxy agent-qdrant",
        outgoing,
        SpanKind.INTERNAL,
        attributes={
            "fault.edge": "agent-qdrant",
            "fault.toxics": "latency(latency=500,jitter=0)",
            "fault.toxic.types": ["latency"],
            "fault.toxic.latency_ms": 500,
        },
        start_time=at(4),
    )
    upstream = qdrant.start_span("POST /search", outgoing, SpanKind.SERVER, start_time=at(5))
    upstream.end(end_time=at(25))
    relay.end(end_time=at(524))
    attempt.end(end_time=at(525))
    call.end(end_time=at(526))
    llm = agent.start_span(
        "llm chat",
        in_root,
        SpanKind.CLIENT,
        attributes={"gen_ai.response.model": "tiny-chat"},
        start_time=at(526),
    )
    llm.set_status(Status(StatusCode.ERROR, "upstream 503"))
    llm.end(end_time=at(600))
    root.end(end_time=at(610))


def test_sdk_spans_through_otlp_and_the_store(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    _services(1.0, exporter)
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    with SpanStore(tmp_path / "traces.db") as store:
        store.add(decode(body, content_type=CONTENT_PROTOBUF))
        spans = store.read()

    out = analyse(
        spans,
        [window(WindowKind.FAULT, "during slow-qdrant", 0, 10, fault="slow-qdrant")],
        [request(TRACE, 1.0, 0.620, ok=False, status=503)],
        t0_wall=T0_WALL,
        time_scale=1.0,
    )
    write_traces(tmp_path, out)

    assert read_traces(tmp_path) == out
    assert (tmp_path / TRACES_NAME).is_file()
    assert (out.spans, out.traces, out.requests_traced) == (6, 1, 1)
    assert out.services == ["agent", "proxy", "qdrant"]
    w = out.windows[0]
    by = {h.hop: h for h in w.hops}
    assert "proxy/proxy agent-qdrant" not in by
    assert by["qdrant/POST /search"].time_s == pytest.approx(0.020)
    # The toxic's hold (the relay less qdrant's own time) is the vector-store call's.
    assert by["agent/qdrant search attempt"].time_s == pytest.approx(0.002 + 0.500)
    assert by["agent/qdrant search attempt"].faults == ["latency(latency=500,jitter=0)"]
    assert by["client/network"].time_s == pytest.approx(0.010)
    assert by["agent/llm chat"].errors == 1
    assert w.top is not None
    assert (w.top.service, w.top.span) == ("agent", "qdrant search attempt")
    assert sum(h.share for h in w.hops) == pytest.approx(1.0)
    (failed,) = out.exemplars
    assert failed.kind == "failed"
    assert failed.window == "during slow-qdrant"
    notes = {s.name: s.note for s in failed.spans}
    assert notes["proxy agent-qdrant"] == "edge agent-qdrant; toxic latency(latency=500,jitter=0)"
    assert notes["llm chat"] == "model tiny-chat; error: upstream 503"
    assert notes["qdrant search attempt"] == "attempt 1"
