"""The trace collector: an OTLP/HTTP receiver on loopback that keeps spans on disk.

``python -m faultday.observe.collector --db spans.db --port 0`` (how the stack supervisor
starts it) and ``faultday traces serve`` run :func:`serve_forever`. What it accepts, its
limits and counters are in docs/traces.md:

* ``POST /v1/traces``: an ``ExportTraceServiceRequest`` (protobuf or OTLP/JSON, gzip or
  not) → 200 with an ``ExportTraceServiceResponse`` (``partial_success.rejected_spans``
  when the store's cap dropped some); 400 malformed, 413 too big, 415 another content
  type, 503 while it is saturated; every reject counted.
* ``GET /stats``: the counters as JSON; ``GET /health``; 404 anywhere else.
* ``--forward URL``: each accepted body, as it came, also goes to the user's own
  collector from a bounded queue on a background thread; a full queue drops (counted),
  ingest never waits for it.

Memory stays bounded under a flood: a body is read only up to ``--max-body`` (and
gunzipped only up to a fixed multiple of it), a few requests are decoded at a time,
connections beyond a bound are closed at once, spans go to SQLite on disk, and the
forward queue is bounded in bodies and bytes. A slow client is cut off by a socket
timeout and an overall deadline per request. The server is the standard library's
``ThreadingHTTPServer``: one thread per connection is enough for loopback exporters
that batch, and it needs no event loop of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Final

import httpx
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from faultday.core import otlp
from faultday.core.otlp import (
    CONTENT_JSON,
    CONTENT_PROTOBUF,
    MAX_BODY,
    OtlpError,
    OtlpTooLarge,
    decode,
)
from faultday.core.spanstore import (
    COLLECTOR_HEALTH_PATH,
    COLLECTOR_STATS_PATH,
    DEFAULT_MAX_SPANS,
    SPANS_DB,
    SpanStore,
    SpanStoreError,
)
from faultday.errors import FaultdayError, UsageError

log = logging.getLogger(__name__)

__all__ = [
    "READY_PREFIX",
    "TRACES_PATH",
    "Collector",
    "CollectorConfig",
    "main",
    "serve_forever",
]

TRACES_PATH: Final = otlp.TRACES_PATH
STATS_PATH: Final = COLLECTOR_STATS_PATH
HEALTH_PATH: Final = COLLECTOR_HEALTH_PATH
READY_PREFIX: Final = "faultday-collector ready"
DEFAULT_PORT: Final = 4318  # OTLP/HTTP's registered port
DECODED_FACTOR: Final = 4  # a gzip body may grow to this many times --max-body, no more
SOCKET_TIMEOUT_S: Final = 10.0  # idle reads and writes of one connection
REQUEST_DEADLINE_S: Final = 30.0  # the whole body of one request, however it trickles
MAX_CONNECTIONS: Final = 64  # open connections (one thread each); more are closed at once
MAX_DECODING: Final = 4  # requests decoded and stored at the same time; more get 503
FORWARD_QUEUE_BODIES: Final = 256
FORWARD_QUEUE_BYTES: Final = 64 * 1024 * 1024
FORWARD_TIMEOUT_S: Final = 5.0
_READ_CHUNK: Final = 64 * 1024
_LOUD_REJECTS: Final = 20  # rejects logged at WARNING; the rest at DEBUG (the counters keep all)
_RPC_INVALID_ARGUMENT: Final = 3
_RPC_RESOURCE_EXHAUSTED: Final = 8
_RPC_UNAVAILABLE: Final = 14


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    db: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_spans: int = DEFAULT_MAX_SPANS
    max_body: int = MAX_BODY
    forward: tuple[str, ...] = ()


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    spans_accepted: int = 0
    spans_dropped: int = 0
    rejected_400: int = 0
    rejected_404: int = 0
    rejected_413: int = 0
    rejected_415: int = 0
    rejected_503: int = 0
    connections_refused: int = 0
    store_failed: int = 0
    forwarded: int = 0
    forward_failed: int = 0
    forward_dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {k: getattr(self, k) for k in self.__slots__ if k != "lock"}


class _Forwarder:
    """POSTs bodies to one URL from a queue bounded in bodies and bytes, on its own thread."""

    def __init__(self, url: str, counters: _Counters) -> None:
        self.url = url
        self._counters = counters
        self._queue: deque[tuple[bytes, dict[str, str]]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"forward {url}", daemon=True)
        self._thread.start()

    def offer(self, body: bytes, headers: dict[str, str]) -> None:
        """Queue a body, or drop it (counted) when the queue is full; never waits."""
        with self._cond:
            full = (
                len(self._queue) >= FORWARD_QUEUE_BODIES
                or self._bytes + len(body) > FORWARD_QUEUE_BYTES
            )
            if full or self._stopping:
                self._counters.add("forward_dropped")
                return
            self._queue.append((body, headers))
            self._bytes += len(body)
            self._cond.notify()

    def stop(self, *, timeout: float) -> None:
        """Send what is queued for up to ``timeout`` seconds, then give up on the rest."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            left = len(self._queue)
            self._queue.clear()
        if left:
            self._counters.add("forward_dropped", left)

    def _next(self) -> tuple[bytes, dict[str, str]] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            body, headers = self._queue.popleft()
            self._bytes -= len(body)
            return body, headers

    def _run(self) -> None:
        with httpx.Client(timeout=FORWARD_TIMEOUT_S) as http:
            while (item := self._next()) is not None:
                self._send(http, *item)

    def _send(self, http: httpx.Client, body: bytes, headers: dict[str, str]) -> None:
        try:
            r = http.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            self._counters.add("forward_failed")
            log.warning("forward to %s failed: %s", self.url, exc)
            return
        if r.is_success:
            self._counters.add("forwarded")
        else:
            self._counters.add("forward_failed")
            log.warning("forward to %s answered %d", self.url, r.status_code)


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that closes connections beyond ``MAX_CONNECTIONS`` at once."""

    daemon_threads = True
    collector: Collector

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        if not self.collector.connection_slots.acquire(blocking=False):
            self.collector.counters.add("connections_refused")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.collector.connection_slots.release()


class Collector:
    """The receiver, its store and its forwarders; :meth:`serve` runs it until :meth:`stop`."""

    def __init__(self, config: CollectorConfig) -> None:
        if config.max_body <= 0:
            raise UsageError(
                f"--max-body must be a positive number of bytes, not {config.max_body}"
            )
        for url in config.forward:
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"--forward {url!r}: give an http:// or https:// URL")
        self.config = config
        self.counters = _Counters()
        try:
            self.store = SpanStore(config.db, max_spans=config.max_spans)
        except SpanStoreError as exc:  # --db and --max-spans are the user's
            raise UsageError(str(exc)) from exc
        self.connection_slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.decoding_slots = threading.BoundedSemaphore(MAX_DECODING)
        self._loud = _LOUD_REJECTS
        try:
            self._server = _Server((config.host, config.port), _Handler)
        except OSError as exc:
            self.store.close()
            raise UsageError(f"cannot listen on {config.host}:{config.port}: {exc}") from exc
        self._server.collector = self
        self.forwarders = [_Forwarder(url, self.counters) for url in config.forward]

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """Stop serving (from another thread), flush the forwarders briefly, close the store."""
        self._server.shutdown()
        self._server.server_close()
        for f in self.forwarders:
            f.stop(timeout=FORWARD_TIMEOUT_S)
        self.store.close()

    def stats(self) -> dict[str, int]:
        out = self.counters.snapshot()
        try:
            out["spans_stored"] = self.store.counters().stored
        except SpanStoreError as exc:
            log.error("%s", exc)  # noqa: TRY400 - the store's reason says it all
        return out

    def reject(self, status: HTTPStatus, reason: str) -> None:
        self.counters.add(f"rejected_{status.value}")
        level = logging.WARNING if self._loud > 0 else logging.DEBUG
        self._loud -= 1
        log.log(level, "rejected (%d): %s", status.value, reason)

    def ingest(self, body: bytes, *, content_type: str, content_encoding: str) -> int:
        """Decode and store one body; return how many spans the cap dropped.

        Raises OtlpError (malformed), OtlpTooLarge, SpanStoreError.
        """
        spans = decode(
            body,
            content_type=content_type,
            content_encoding=content_encoding,
            max_body=self.config.max_body,
            max_decoded=self.config.max_body * DECODED_FACTOR,
        )
        accepted = self.store.add(spans)
        dropped = len(spans) - accepted
        self.counters.add("spans_accepted", accepted)
        self.counters.add("spans_dropped", dropped)
        headers = {"Content-Type": content_type}
        if content_encoding:
            headers["Content-Encoding"] = content_encoding
        for f in self.forwarders:
            f.offer(body, headers)
        return dropped


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_TIMEOUT_S  # on the socket: an idle client is cut off
    protocol_version = "HTTP/1.1"  # keep-alive: the SDK exporters reuse one connection
    server_version = "faultday-collector"

    @property
    def collector(self) -> Collector:
        return self.server.collector

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == STATS_PATH:
            self._send_json(HTTPStatus.OK, self.collector.stats())
        elif path == HEALTH_PATH:
            self._send_json(HTTPStatus.OK, {"status": "ok"})
        else:
            self._not_found()

    def do_POST(self) -> None:
        self.collector.counters.add("requests")
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self._not_found()
            return
        content_type = self.headers.get("Content-Type", "")
        media = content_type.split(";", 1)[0].strip().lower()
        if media not in (CONTENT_PROTOBUF, CONTENT_JSON):
            self._reject(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type {content_type!r}")
            return
        body = self._read_body()
        if body is None:
            return
        if not self.collector.decoding_slots.acquire(blocking=False):
            self._reject(HTTPStatus.SERVICE_UNAVAILABLE, "busy: try again", json_body=media)
            return
        try:
            self._ingest(body, content_type=content_type, media=media)
        finally:
            self.collector.decoding_slots.release()

    def _ingest(self, body: bytes, *, content_type: str, media: str) -> None:
        encoding = self.headers.get("Content-Encoding", "")
        try:
            dropped = self.collector.ingest(
                body, content_type=content_type, content_encoding=encoding
            )
        except OtlpTooLarge as exc:
            self._reject(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, exc.reason, json_body=media)
            return
        except OtlpError as exc:
            self._reject(HTTPStatus.BAD_REQUEST, exc.reason, json_body=media)
            return
        except SpanStoreError as exc:
            self.collector.counters.add("store_failed")
            log.error("%s", exc)  # noqa: TRY400 - the store's reason says it all
            self._send_status(HTTPStatus.SERVICE_UNAVAILABLE, str(exc), media=media)
            return
        response = ExportTraceServiceResponse()
        if dropped:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(
                    rejected_spans=dropped,
                    error_message=f"the span store is full ({self.collector.config.max_spans})",
                )
            )
        self._send_message(HTTPStatus.OK, response, media=media)

    def _read_body(self) -> bytes | None:
        """The body, read up to its bounded Content-Length before a deadline; None: answered."""
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or length_text is None:
            self._reject(HTTPStatus.BAD_REQUEST, "Content-Length is required (no chunked bodies)")
            return None
        try:
            length = int(length_text)
        except ValueError:
            self._reject(HTTPStatus.BAD_REQUEST, f"Content-Length {length_text[:40]!r}")
            return None
        if length < 0:
            self._reject(HTTPStatus.BAD_REQUEST, f"Content-Length {length}")
            return None
        if length > self.collector.config.max_body:
            limit = self.collector.config.max_body
            self._reject(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"{length} bytes; limit {limit}")
            return None
        chunks: list[bytes] = []
        left = length
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        try:
            while left > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(left, _READ_CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:  # the socket timeout included
            log.debug("reading a body from %s: %s", self.address_string(), exc)
        if left > 0:
            self.close_connection = True  # no answer: the client is gone or too slow
            self.collector.reject(HTTPStatus.BAD_REQUEST, f"body cut short ({left} bytes missing)")
            return None
        return b"".join(chunks)

    def _reject(self, status: HTTPStatus, reason: str, *, json_body: str = CONTENT_JSON) -> None:
        self.collector.reject(status, reason)
        # What is left of the body is not read: close rather than parse it as a request.
        self.close_connection = True
        self._send_status(status, reason, media=json_body)

    def _not_found(self) -> None:
        self.collector.counters.add("rejected_404")
        self.close_connection = True
        self._send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path[:100]!r}"})

    def _send_status(self, status: HTTPStatus, message: str, *, media: str) -> None:
        """OTLP/HTTP's error body: a google.rpc.Status, in the request's encoding."""
        code = {
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE: _RPC_RESOURCE_EXHAUSTED,
            HTTPStatus.SERVICE_UNAVAILABLE: _RPC_UNAVAILABLE,
        }.get(status, _RPC_INVALID_ARGUMENT)
        if media == CONTENT_PROTOBUF:
            self._send(status, _rpc_status(code, message), CONTENT_PROTOBUF)
        else:
            self._send_json(status, {"code": code, "message": message})

    def _send_message(
        self, status: HTTPStatus, message: ExportTraceServiceResponse, *, media: str
    ) -> None:
        if media == CONTENT_PROTOBUF:
            self._send(status, message.SerializeToString(), CONTENT_PROTOBUF)
        else:
            text = json_format.MessageToJson(message, indent=None)
            self._send(status, text.encode(), CONTENT_JSON)

    def _send_json(self, status: HTTPStatus, doc: object) -> None:
        self._send(status, json.dumps(doc).encode(), CONTENT_JSON)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError as exc:
            self.close_connection = True
            log.debug("answering %s: %s", self.address_string(), exc)


def _rpc_status(code: int, message: str) -> bytes:
    """``google.rpc.Status{code, message}`` in protobuf's wire format.

    Written out here because its generated module (googleapis-common-protos) has no type
    information for mypy; the two fields are a varint (1) and a length-delimited string (2).
    """
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def serve_forever(config: CollectorConfig, *, log_level: str = "info") -> None:
    """Run the collector until SIGINT or SIGTERM; print the ready line once it listens."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    collector = Collector(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to return: never call it from its own thread.
        threading.Thread(target=collector.stop, name="stop", daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The stack supervisor and the tests read the address from this line (--port 0).
    print(
        f"{READY_PREFIX} otlp={collector.base_url}{TRACES_PATH} "
        f"stats={collector.base_url}{STATS_PATH} db={config.db}",
        flush=True,
    )
    collector.serve()
    log.info("collector stopped: %s", json.dumps(collector.stats()))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m faultday.observe.collector",
        description="faultday's OTLP/HTTP trace collector (docs/traces.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="listen port (0 = ephemeral)")
    p.add_argument("--db", type=Path, default=Path(SPANS_DB), help="the span store's SQLite file")
    p.add_argument("--max-spans", type=int, default=DEFAULT_MAX_SPANS, help="spans kept at most")
    p.add_argument("--max-body", type=int, default=MAX_BODY, help="bytes per request at most")
    p.add_argument(
        "--forward",
        action="append",
        default=[],
        metavar="URL",
        help="also POST every accepted body to this OTLP/HTTP URL (repeatable)",
    )
    p.add_argument("--log-level", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config = CollectorConfig(
        db=args.db,
        host=args.host,
        port=args.port,
        max_spans=args.max_spans,
        max_body=args.max_body,
        forward=tuple(args.forward),
    )
    try:
        serve_forever(config, log_level=args.log_level)
    except FaultdayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
