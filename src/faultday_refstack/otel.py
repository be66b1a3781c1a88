"""OpenTelemetry for every component of the reference stack, set up from the standard environment.

A component exports spans only when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
set (the full URL, ending in ``/v1/traces``), over OTLP/HTTP protobuf, as
``OTEL_SERVICE_NAME`` (else its own default name). Each process builds its own
``TracerProvider`` (no global one): spans go through a ``BatchSpanProcessor``,
whose bounded queue drops spans rather than block a request, and which the
component shuts down (flushing what is queued) on its way out.

Trace context travels as W3C ``traceparent``/``tracestate`` headers, read and
written by the SDK's ``TraceContextTextMapPropagator`` only (not the global
propagator, which ``OTEL_PROPAGATORS`` could change under us).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faultday_refstack.errors import UsageError

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
SERVICE_ENV = "OTEL_SERVICE_NAME"
# The SDK's own names for the export timeout; ours is short when neither is set, so a
# component whose collector is gone still stops within seconds (the default is 10 s a batch).
TIMEOUT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
EXPORT_TIMEOUT_S = 2.0
PROTOCOL = "http/protobuf"
TRACE_HEADERS = (b"traceparent", b"tracestate")

PROPAGATOR = TraceContextTextMapPropagator()

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


def otlp_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces URL when export is configured, else None.

    Raises UsageError for a protocol other than http/protobuf (the only exporter installed).
    """
    env = os.environ if environ is None else environ
    endpoint = env.get(ENDPOINT_ENV, "").strip()
    if not endpoint:
        return None
    protocol = env.get(PROTOCOL_ENV, PROTOCOL).strip() or PROTOCOL
    if protocol != PROTOCOL:
        raise UsageError(f"{PROTOCOL_ENV}={protocol!r}: only {PROTOCOL!r} is supported")
    return endpoint


def service_name(default: str) -> str:
    """``OTEL_SERVICE_NAME`` when set, else ``default``."""
    return os.environ.get(SERVICE_ENV, "").strip() or default


def otlp_processor(endpoint: str) -> SpanProcessor:
    """A batch processor exporting to ``endpoint`` (bounded queue; never blocks a request)."""
    timeout = None if any(os.environ.get(n) for n in TIMEOUT_ENVS) else EXPORT_TIMEOUT_S
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=timeout))


def tracer_provider(
    *,
    default_service: str,
    extra: Iterable[SpanProcessor] = (),
    attributes: Mapping[str, str] | None = None,
    endpoint: str | None = None,
) -> TracerProvider | None:
    """A provider for one component: OTLP when configured, plus ``extra`` processors.

    ``endpoint`` (a command-line flag) overrides the environment's. None when there is
    nothing to export to (no endpoint, no extra processor): the component then skips
    every span.
    """
    processors = list(extra)
    endpoint = endpoint or otlp_endpoint()
    if endpoint:
        processors.append(otlp_processor(endpoint))
    if not processors:
        return None
    resource = Resource.create(
        {**(attributes or {}), "service.name": service_name(default_service)}
    )
    provider = TracerProvider(resource=resource)
    for p in processors:
        provider.add_span_processor(p)
    return provider


def extract(headers: Iterable[tuple[bytes, bytes]]) -> Context:
    """The W3C trace context in raw ASGI headers (an empty context when there is none)."""
    carrier = {
        k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k.lower() in TRACE_HEADERS
    }
    return PROPAGATOR.extract(carrier)


def inject(headers: dict[str, str] | None = None) -> dict[str, str]:
    """``headers`` with the current span's ``traceparent`` (and ``tracestate``) added."""
    carrier = {} if headers is None else headers
    PROPAGATOR.inject(carrier)
    return carrier


class ServerSpans:
    """ASGI middleware: one SERVER span per HTTP request, parented on its ``traceparent``.

    Written on the SDK alone: opentelemetry-instrumentation-asgi would be a dependency
    of the stack for the few lines here. The span is named ``METHOD route`` once the
    router has matched (the route's template, never the raw path); ``route_of`` may
    name it instead. A 5xx answer, or an exception, ends it with status ERROR.
    """

    def __init__(
        self,
        app: Asgi,
        *,
        tracer: Tracer,
        route_of: Callable[[Scope], str | None] | None = None,
        skip: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.tracer = tracer
        self.route_of = route_of or _starlette_route
        self.skip = frozenset(skip)  # paths whose spans something else writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.skip:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        status = [0]

        async def send_status(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        with self.tracer.start_as_current_span(
            method,
            context=extract(scope.get("headers", ())),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self.app(scope, receive, send_status)
            except Exception as exc:
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
                raise
            finally:
                route = self.route_of(scope)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                if status[0]:
                    span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_status(Status(StatusCode.ERROR, f"HTTP {status[0]}"))


def _starlette_route(scope: Scope) -> str | None:
    """The template of the route Starlette's router matched (it writes it into the scope)."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else None
