"""The proxy's span exporter process: records on stdin become spans, exported over OTLP/HTTP.

``python -m faultday.proxy.otlp``, started by ``ProxyTracing.start`` with the
proxy's environment. It reads lists of marshal-encoded ``Record``s until its stdin closes,
makes each an OpenTelemetry span (explicit start and end times, the parent read
from ``traceparent`` by the ``TraceContextTextMapPropagator``) and hands it to a
``BatchSpanProcessor`` (a bounded queue: full, it drops; OTEL_BSP_* size it).
At end of input it flushes the queue and exits. SIGINT and SIGTERM are ignored:
a signal to the proxy's process group must not lose what the proxy still hands
over as it shuts down; the closed pipe ends this process even if the proxy dies.
"""

from __future__ import annotations

import logging
import marshal
import os
import signal
import sys
from typing import BinaryIO

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faultday.errors import FaultdayError
from faultday.proxy.tracing import EdgeCache, Record, TraceSettings, span_data

log = logging.getLogger(__name__)

DEFAULT_SERVICE = "proxy"
SCOPE = "faultday.proxy"

_PROPAGATOR = TraceContextTextMapPropagator()
_NO_PARENT = Context()


def provider(settings: TraceSettings) -> tuple[TracerProvider, Tracer]:
    """A TracerProvider exporting to ``settings.endpoint`` through a BatchSpanProcessor."""
    resource = Resource.create({})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    tp = TracerProvider(resource=resource)
    # Headers, timeout and compression: the exporter reads OTEL_EXPORTER_OTLP_* itself.
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint)))
    return tp, tp.get_tracer(SCOPE)


def emit(tracer: Tracer, record: Record, edges: EdgeCache) -> None:
    """One record as one span, ended at the record's end time."""
    data = span_data(record, edges)
    if data.traceparent:
        carrier = {"traceparent": data.traceparent}
        if data.tracestate:
            carrier["tracestate"] = data.tracestate
        parent = _PROPAGATOR.extract(carrier)
    else:
        parent = _NO_PARENT
    span = tracer.start_span(
        data.name,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=data.attributes,
        start_time=data.start_ns,
    )
    if data.error:
        span.set_status(Status(StatusCode.ERROR, data.error))
    span.end(end_time=data.end_ns)


def pump(source: BinaryIO, tracer: Tracer) -> int:
    """Spans from ``source`` until it ends; how many."""
    edges = EdgeCache()
    count = 0
    while True:
        try:
            records = marshal.load(source)  # noqa: S302 - our parent's pipe, our own records
        except EOFError:
            return count
        except (ValueError, TypeError) as exc:
            log.error("proxy traces: unreadable records after %d spans: %s", count, exc)  # noqa: TRY400 - input, not a bug
            return count
        for record in records:
            emit(tracer, record, edges)
        count += len(records)


NICENESS = 10


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # Relaying comes first: on a machine with no core to spare, the exporter gets what
    # the relay leaves, and the spans it cannot keep up with are dropped, not waited for.
    os.nice(NICENESS)
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = TraceSettings.from_env(os.environ)
    except FaultdayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings is None:
        print("error: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not set", file=sys.stderr)
        return 2
    tp, tracer = provider(settings)
    try:
        pump(sys.stdin.buffer, tracer)
    finally:
        tp.shutdown()  # the BatchSpanProcessor's queue goes out first
    return 0


if __name__ == "__main__":
    sys.exit(main())
