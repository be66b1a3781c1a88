"""What a relayed HTTP request's span says: settings, the request's record, attributes.

Tracing is on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (docs/proxy.md,
"Traces"). The relay notes what it sees of one request in a ``RequestSpan`` (a
few slotted fields, no SDK object while the request is in flight);
``faultday.proxy.otlp`` turns it into an OpenTelemetry span. Nothing here imports
OpenTelemetry: a proxy without tracing never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from faultday.errors import UsageError
from faultday.proxy.models import HttpLatencyAttrs, LatencyAttrs, dump_attributes, split_hostport

if TYPE_CHECKING:
    from opentelemetry.context import Context

# An attribute value as OpenTelemetry takes it (opentelemetry.util.types.AttributeValue).
AttributeValue = str | bool | int | float | list[str]

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
DISABLED_ENV = "OTEL_SDK_DISABLED"
PROTOCOL = "http/protobuf"

# Why a span ended without its whole response (its ``error.type``), besides the
# type of a toxic that cut it (stream_cut, timeout, reset_peer, limit_data).
UPSTREAM_CLOSED = "upstream_closed"
CLIENT_CLOSED = "client_closed"
EDGE_DISABLED = "edge_disabled"
CONNECTION_CLOSED = "connection_closed"
NOT_HTTP = "not_http"


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Where spans go, as the standard OTEL_* variables say."""

    endpoint: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TraceSettings | None:
        """None when tracing is off; UsageError for a protocol the proxy cannot export."""
        endpoint = env.get(ENDPOINT_ENV, "").strip()
        if not endpoint or env.get(DISABLED_ENV, "").strip().lower() == "true":
            return None
        protocol = env.get(PROTOCOL_ENV, PROTOCOL).strip() or PROTOCOL
        if protocol != PROTOCOL:
            raise UsageError(
                f"{PROTOCOL_ENV}={protocol!r}: the fault proxy exports OTLP over HTTP only; "
                f"valid: {PROTOCOL!r} (or unset)"
            )
        if not endpoint.startswith(("http://", "https://")):
            raise UsageError(
                f"{ENDPOINT_ENV}={endpoint!r}: not an http(s) URL "
                "(such as http://127.0.0.1:4318/v1/traces)"
            )
        return cls(endpoint=endpoint)


class RequestSpan:
    """What the relay saw of one HTTP request, until its response ends."""

    __slots__ = (
        "error",
        "injected",
        "method",
        "parent",
        "path",
        "request_bytes",
        "response_bytes",
        "start_ns",
        "status",
        "toxics",
    )

    def __init__(
        self, parent: Context, start_ns: int, method: str, path: str, toxics: tuple[ToxicView, ...]
    ) -> None:
        self.parent = parent
        self.start_ns = start_ns
        self.method = method
        self.path = path
        self.toxics = toxics
        self.request_bytes = 0
        self.response_bytes = 0
        self.status = 0
        self.injected = False  # the proxy answered (http_error), not the upstream
        self.error = ""  # error.type: why the response did not end whole


@dataclass(frozen=True, slots=True)
class ToxicView:
    """A toxic as a span shows it: ``latency(latency=500,jitter=0)``, and its latency."""

    type: str
    text: str
    latency_ms: int
    jitter_ms: int


def describe_toxic(type_: str, stream: str, attrs: BaseModel) -> ToxicView:
    """The span's view of one toxic (``fault.toxics`` lists these texts)."""
    values = ",".join(f"{k}={v}" for k, v in dump_attributes(attrs).items())
    where = "" if stream == "downstream" else f"[{stream}]"
    latency = jitter = 0
    if isinstance(attrs, LatencyAttrs | HttpLatencyAttrs):
        latency, jitter = attrs.latency, attrs.jitter
    return ToxicView(type_, f"{type_}{where}({values})", latency, jitter)


def toxic_attributes(views: tuple[ToxicView, ...]) -> dict[str, AttributeValue]:
    """The ``fault.toxic*`` attributes of the toxics in force on one request."""
    if not views:
        return {}
    return {
        "fault.toxics": "; ".join(v.text for v in views),
        "fault.toxic.types": [v.type for v in views],
        "fault.toxic.count": len(views),
        "fault.toxic.latency_ms": sum(v.latency_ms for v in views),
        "fault.toxic.jitter_ms": sum(v.jitter_ms for v in views),
    }


def edge_attributes(name: str, upstream: str) -> dict[str, AttributeValue]:
    """The attributes every span of one edge carries."""
    attrs: dict[str, AttributeValue] = {"fault.edge": name}
    try:
        host, port = split_hostport(upstream)
    except ValueError:
        attrs["server.address"] = upstream
    else:
        attrs["server.address"] = host
        attrs["server.port"] = port
    return attrs
