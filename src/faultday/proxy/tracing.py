"""A span per relayed HTTP request: settings, the request's record, its attributes.

Tracing is on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (docs/proxy.md,
"Traces"). The relay notes what it sees of one request in a ``RequestSpan`` (a
few slotted fields) and, when the response ends, ``ProxyTracing`` hands it as a
``Record`` to the exporter process (``faultday.proxy.otlp``), which makes the
OpenTelemetry span. Nothing here imports OpenTelemetry: neither a proxy without
tracing nor the relay's process ever loads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import marshal
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from faultday.errors import UsageError
from faultday.proxy.models import HttpLatencyAttrs, LatencyAttrs, dump_attributes, split_hostport

if TYPE_CHECKING:
    import asyncio

    from faultday.proxy.http1 import Head

log = logging.getLogger(__name__)

_F_SETPIPE_SZ = 1031

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
PROXY_STOPPED = "proxy_stopped"
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
        "path",
        "request_bytes",
        "response_bytes",
        "start_ns",
        "status",
        "toxics",
        "traceparent",
        "tracestate",
    )

    # Positional: made once per traced request, and keywords cost a third of the call.
    def __init__(  # noqa: PLR0917
        self,
        traceparent: str,
        tracestate: str,
        start_ns: int,
        method: str,
        path: str,
        toxics: tuple[ToxicView, ...],
    ) -> None:
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.start_ns = start_ns
        self.method = method
        self.path = path
        self.toxics = toxics
        self.request_bytes = 0
        self.response_bytes = 0
        self.status = 0
        self.injected = False  # the proxy answered (http_error), not the upstream
        self.error = ""  # error.type: why the response did not end whole


# A toxic as a span shows it: (type, text, latency ms, jitter ms), such as
# ("latency", "latency(latency=500,jitter=0)", 500, 0). A plain tuple, not a class:
# the relay hands it on to the exporter process as it is, and marshal takes tuples.
ToxicView = tuple[str, str, int, int]


def describe_toxic(type_: str, stream: str, attrs: BaseModel) -> ToxicView:
    """The span's view of one toxic (``fault.toxics`` lists these texts)."""
    values = ",".join(f"{k}={v}" for k, v in dump_attributes(attrs).items())
    where = "" if stream == "downstream" else f"[{stream}]"
    latency = jitter = 0
    if isinstance(attrs, LatencyAttrs | HttpLatencyAttrs):
        latency, jitter = attrs.latency, attrs.jitter
    return (type_, f"{type_}{where}({values})", latency, jitter)


def toxic_attributes(views: tuple[ToxicView, ...]) -> dict[str, AttributeValue]:
    """The ``fault.toxic*`` attributes of the toxics in force on one request."""
    if not views:
        return {}
    return {
        "fault.toxics": "; ".join(v[1] for v in views),
        "fault.toxic.types": [v[0] for v in views],
        "fault.toxic.count": len(views),
        "fault.toxic.latency_ms": sum(v[2] for v in views),
        "fault.toxic.jitter_ms": sum(v[3] for v in views),
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


# One finished span as the relay hands it to the exporter process (lists of them,
# marshal-encoded):
# name, edge, upstream, traceparent, tracestate, start_ns, end_ns, method, path,
# status, request bytes, response bytes, injected, error.type, toxics.
Record = tuple[
    str,
    str,
    str,
    str,
    str,
    int,
    int,
    str,
    str,
    int,
    int,
    int,
    bool,
    str,
    tuple[ToxicView, ...],
]


@dataclass(frozen=True, slots=True)
class SpanData:
    """A record as the exporter makes it into a span."""

    name: str
    traceparent: str
    tracestate: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    error: str


class EdgeCache:
    """Each edge's attributes, parsed once."""

    def __init__(self) -> None:
        self._edges: dict[tuple[str, str], dict[str, AttributeValue]] = {}

    def get(self, name: str, upstream: str) -> dict[str, AttributeValue]:
        key = (name, upstream)
        attrs = self._edges.get(key)
        if attrs is None:
            if len(self._edges) > 1024:  # upstreams change rarely; bounded all the same
                self._edges.clear()
            attrs = self._edges[key] = edge_attributes(name, upstream)
        return attrs


def span_data(record: Record, edges: EdgeCache | None = None) -> SpanData:
    """The span a record describes: every attribute of the table in docs/proxy.md."""
    (name, edge, upstream, traceparent, tracestate, start_ns, end_ns) = record[:7]
    method, path, status, req_bytes, resp_bytes, injected, error, toxics = record[7:]
    attrs: dict[str, AttributeValue] = {
        **(edges.get(edge, upstream) if edges is not None else edge_attributes(edge, upstream)),
        "http.request.method": method,
        "url.path": path,
        "http.request.size": req_bytes,
        "http.response.size": resp_bytes,
    }
    if status:
        attrs["http.response.status_code"] = status
    if injected:
        attrs["fault.injected_response"] = True
    attrs.update(toxic_attributes(toxics))
    error = error or (str(status) if status >= 500 else "")
    if injected and not error:
        error = "http_error"
    if error:
        attrs["error.type"] = error
    return SpanData(name, traceparent, tracestate, start_ns, end_ns, attrs, error)


class ProxyTracing:
    """The relay's side of tracing: records to the exporter process, never a wait.

    Making and encoding one OpenTelemetry span costs ~100 µs of Python (SDK and
    OTLP encoder) where the relay spends ~75 µs on a whole request: in the proxy's
    own process that halved its requests/s (bench/RESULTS.md, "proxy tracing").
    So the SDK runs in a child process (``python -m faultday.proxy.otlp``) and the
    relay only keeps each finished request as a tuple; every ``FLUSH_DELAY`` s
    (or ``FLUSH_COUNT`` records) they are marshalled in one call and written to the
    child's stdin. Nothing waits: a write the pipe cannot take stays buffered;
    past ``BUFFER_LIMIT`` bytes or ``PENDING_LIMIT`` records, spans are dropped
    (counted, logged).
    """

    FLUSH_COUNT = 256
    FLUSH_DELAY = 0.02
    PENDING_LIMIT = 65536
    BUFFER_LIMIT = 8 << 20
    SHUTDOWN_WAIT = 5.0

    def __init__(self, settings: TraceSettings) -> None:
        self.settings = settings
        self.dropped = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd = -1
        self._pending: list[Record] = []
        self._buf = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        # Wall clock = monotonic + offset: one clock read per span edge, not two;
        # taken again at every flush, so a stepped wall clock is followed within 20 ms.
        self._offset = time.time_ns() - time.monotonic_ns()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the exporter process (it inherits the OTEL_* environment)."""
        self._loop = loop
        # stdout elsewhere: the proxy's own is read for its readiness line, and must end
        # when the proxy does. stderr is the proxy's, so the exporter's errors are in its log.
        proc = self._proc = subprocess.Popen(
            [sys.executable, "-m", "faultday.proxy.otlp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        assert proc.stdin is not None
        self._fd = proc.stdin.fileno()
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._fd, _F_SETPIPE_SZ, 1 << 20)
        os.set_blocking(self._fd, False)
        endpoint = self.settings.endpoint
        log.info("proxy traces: exporting to %s (exporter pid %d)", endpoint, proc.pid)

    def begin(self, ts: float, head: Head, toxics: tuple[ToxicView, ...]) -> RequestSpan:
        """A request's head arrived at monotonic time ``ts``, with ``toxics`` in force."""
        traceparent = tracestate = ""
        for key, value in head.headers:  # one pass for both: this runs once per request
            if key == "traceparent":
                traceparent = value
            elif key == "tracestate":
                tracestate = value
        start_ns = int(ts * 1e9) + self._offset
        path = head.target.partition("?")[0]
        return RequestSpan(traceparent, tracestate, start_ns, head.method, path, toxics)

    def end(self, span: RequestSpan, *, name: str, edge: str, upstream: str) -> None:
        """The response ended (whole or not): the span ends now."""
        pending = self._pending
        if len(pending) >= self.PENDING_LIMIT or self._fd < 0:
            self._drop(1)
            return
        pending.append(
            (
                name,
                edge,
                upstream,
                span.traceparent,
                span.tracestate,
                span.start_ns,
                time.monotonic_ns() + self._offset,
                span.method,
                span.path,
                span.status,
                span.request_bytes,
                span.response_bytes,
                span.injected,
                span.error,
                span.toxics,
            )
        )
        if len(pending) >= self.FLUSH_COUNT:
            self._flush()
        elif self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(self.FLUSH_DELAY, self._flush)

    def _drop(self, n: int) -> None:
        if not self.dropped:
            log.warning("proxy traces: the exporter process is behind or gone; dropping spans")
        self.dropped += n

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._offset = time.time_ns() - time.monotonic_ns()
        if self._pending:
            if self._fd >= 0 and len(self._buf) < self.BUFFER_LIMIT:
                self._buf += marshal.dumps(self._pending)
            else:
                self._drop(len(self._pending))
            self._pending = []
        if not self._buf or self._fd < 0:
            return
        try:
            n = os.write(self._fd, self._buf)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            log.error("proxy traces: the exporter process is gone (%s); no more spans", exc)  # noqa: TRY400 - no bug of ours
            self._buf.clear()
            self._fd = -1
            return
        del self._buf[:n]
        if self._buf and self._loop is not None:
            self._timer = self._loop.call_later(self.FLUSH_DELAY, self._flush)

    def shutdown(self) -> None:
        """Hand over what is left, close the pipe; the exporter flushes and exits."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        self._flush()
        deadline = time.monotonic() + self.SHUTDOWN_WAIT
        while self._buf and self._fd >= 0 and time.monotonic() < deadline:
            select.select([], [self._fd], [], max(0.0, deadline - time.monotonic()))
            self._flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        self._fd = -1
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            wait = self.SHUTDOWN_WAIT
            log.warning("proxy traces: the exporter did not finish within %gs; stopped", wait)
            proc.kill()
            proc.wait(5)
        if self.dropped:
            log.warning("proxy traces: %d spans dropped", self.dropped)
