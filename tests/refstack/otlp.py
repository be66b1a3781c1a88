"""A small OTLP/HTTP traces receiver for tests: a stdlib HTTP server on 127.0.0.1 in a thread.

Each POST to /v1/traces is decoded with the official protobuf messages
(opentelemetry-proto) into ``Got`` spans, which tests wait for and inspect.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

KINDS = {v: k.removeprefix("SPAN_KIND_") for k, v in Span.SpanKind.items()}
STATUSES = {v: k.removeprefix("STATUS_CODE_") for k, v in Status.StatusCode.items()}


@dataclass(frozen=True)
class Got:
    """One received span, decoded."""

    service: str
    scope: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    name: str
    kind: str  # SERVER, CLIENT, INTERNAL, ...
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    status: str  # UNSET, OK, ERROR
    message: str
    resource: dict[str, Any]


def _value(v: AnyValue) -> Any:
    field = v.WhichOneof("value")
    if field == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, field) if field else None


def _hex_ids_to_base64(doc: Any) -> Any:
    """OTLP/JSON writes ids in hex where protobuf's JSON mapping expects base64."""
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return doc


def decode(body: bytes, content_type: str = "application/x-protobuf") -> list[Got]:
    """An export body, protobuf or JSON (tritonserver's opentelemetry-cpp posts JSON)."""
    req = ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), req)
    else:
        req.ParseFromString(body)
    out: list[Got] = []
    for rs in req.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Got(
                        service=str(resource.get("service.name", "")),
                        scope=ss.scope.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        name=s.name,
                        kind=KINDS.get(s.kind, str(s.kind)),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attrs={a.key: _value(a.value) for a in s.attributes},
                        status=STATUSES.get(s.status.code, str(s.status.code)),
                        message=s.status.message,
                        resource=resource,
                    )
                )
    return out


class Receiver:
    """The spans received so far, and the URL to send them to."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        self.spans: list[Got] = []
        self.posts = 0
        self._lock = threading.Lock()

    def add(self, spans: list[Got]) -> None:
        with self._lock:
            self.spans.extend(spans)
            self.posts += 1

    def snapshot(self) -> list[Got]:
        with self._lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[Got]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]

    def wait(self, done: Callable[[list[Got]], bool], timeout: float = 15.0) -> list[Got]:
        """Every span received, once ``done`` holds of them (bounded; fails with what came)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.snapshot()
            if done(got):
                return got
            time.sleep(0.05)
        names = sorted({(s.service, s.name) for s in self.snapshot()})
        raise AssertionError(f"spans never arrived as expected; received: {names}")

    def env(self, service: str) -> dict[str, str]:
        """The environment that points a component at this receiver."""
        return {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.url,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service,
            # Export as soon as a span ends, so tests wait milliseconds, not seconds.
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }


@contextmanager
def receiver() -> Iterator[Receiver]:
    """Run a receiver for the duration of the block; its thread and socket are closed after."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            holder[0].add(decode(body, self.headers.get("content-type") or ""))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(server))
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def by_id(spans: list[Got]) -> dict[str, Got]:
    return {s.span_id: s for s in spans}


def ancestors(span: Got, spans: list[Got]) -> list[Got]:
    """The span's parents, nearest first (bounded by the number of spans)."""
    index = by_id(spans)
    out: list[Got] = []
    cur = span
    for _ in range(len(spans)):
        parent = index.get(cur.parent_id)
        if parent is None:
            break
        out.append(parent)
        cur = parent
    return out
