"""The proxy's tracer: RequestSpans become OpenTelemetry spans, exported over OTLP/HTTP.

Loaded only when tracing is on (``TraceSettings.from_env``). Each span is made
when its response ends, with explicit start and end times, and handed to a
``BatchSpanProcessor``: a bounded queue that drops rather than blocks, exported
by its own thread, flushed by ``shutdown()``.
"""

from __future__ import annotations

import logging
import time

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faultday.proxy.tracing import (
    AttributeValue,
    RequestSpan,
    ToxicView,
    TraceSettings,
    toxic_attributes,
)

log = logging.getLogger(__name__)

DEFAULT_SERVICE = "proxy"
SCOPE = "faultday.proxy"
SHUTDOWN_TIMEOUT_MS = 5000

_PROPAGATOR = TraceContextTextMapPropagator()
_NO_PARENT = Context()


class ProxyTracing:
    """The proxy's tracer: one TracerProvider, one BatchSpanProcessor."""

    def __init__(self, exporter: SpanExporter) -> None:
        resource = Resource.create({})
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
        # The queue's bound and batch sizes come from OTEL_BSP_* (the SDK reads them);
        # a full queue drops the span: the relay never waits on the exporter.
        self.processor = BatchSpanProcessor(exporter)
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(self.processor)
        self.tracer: Tracer = self.provider.get_tracer(SCOPE)

    @classmethod
    def from_settings(cls, settings: TraceSettings) -> ProxyTracing:
        # Headers, timeout and compression: the exporter reads OTEL_EXPORTER_OTLP_* itself.
        return cls(OTLPSpanExporter(endpoint=settings.endpoint))

    def begin(
        self,
        *,
        ts: float,
        traceparent: str,
        tracestate: str,
        method: str,
        target: str,
        toxics: tuple[ToxicView, ...],
    ) -> RequestSpan:
        """A request's head arrived at monotonic time ``ts``."""
        if traceparent:
            carrier = {"traceparent": traceparent}
            if tracestate:
                carrier["tracestate"] = tracestate
            parent = _PROPAGATOR.extract(carrier)
        else:
            parent = _NO_PARENT
        start_ns = time.time_ns() - int((time.monotonic() - ts) * 1e9)
        path = target.split("?", 1)[0]
        return RequestSpan(parent, start_ns, method, path, toxics)

    def end(self, span: RequestSpan, *, name: str, edge: dict[str, AttributeValue]) -> None:
        """The response ended (whole or not): export the span, ending now."""
        end_ns = time.time_ns()
        attrs: dict[str, AttributeValue] = {
            **edge,
            "http.request.method": span.method,
            "url.path": span.path,
            "http.request.size": span.request_bytes,
            "http.response.size": span.response_bytes,
        }
        if span.status:
            attrs["http.response.status_code"] = span.status
        if span.injected:
            attrs["fault.injected_response"] = True
        attrs.update(toxic_attributes(span.toxics))
        error = span.error or (str(span.status) if span.status >= 500 else "")
        if span.injected and not error:
            error = "http_error"
        if error:
            attrs["error.type"] = error
        otel = self.tracer.start_span(
            name,
            context=span.parent,
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            start_time=span.start_ns,
        )
        if error:
            otel.set_status(Status(StatusCode.ERROR, error))
        otel.end(end_time=end_ns)

    def shutdown(self) -> None:
        """Export what is queued (bounded by SHUTDOWN_TIMEOUT_MS plus one export's timeout)."""
        if not self.processor.force_flush(SHUTDOWN_TIMEOUT_MS):
            log.warning("proxy traces: not every queued span was exported at shutdown")
        self.provider.shutdown()
