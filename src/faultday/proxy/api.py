"""Toxiproxy 2.12's HTTP API on asyncio, framed by httptools (llhttp).

The API shares the proxies' event loop (as Toxiproxy's does), starts in
milliseconds and applies a toxic in one loop iteration. Requests are framed by
llhttp, not by hand: a request it refuses (bad framing, a body over
``MAX_BODY``) is answered 400 and the connection closed, so no unread body is
ever taken for a further request. Routes, status codes and error texts are
Toxiproxy's (``api.go``): clients match on them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import json
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

import httptools
import pydantic_core
from pydantic import BaseModel, JsonValue, ValidationError

from faultday import __version__
from faultday.proxy.metrics import render_metrics
from faultday.proxy.models import (
    ATTRS,
    TOXIPROXY_VERSION,
    ProxySpec,
    ProxyUpdate,
    Stream,
    ToxicSpec,
    dump_attributes,
    split_hostport,
    validate,
    validation_message,
)
from faultday.proxy.server import Proxy, ProxyError, bind_listener
from faultday.proxy.toxics import Toxic
from faultday_wire.webguard import Refusal, check_request

if TYPE_CHECKING:
    from faultday.proxy.server import ProxyServer

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 120.0
MAX_BODY = 1 << 20
MAX_HEAD = 64 << 10  # request line and headers
MAX_DEPTH = 64  # JSON nesting; Toxiproxy's bodies are two levels deep
RESOLVE_TIMEOUT = 5.0
LINGER_TIMEOUT = 2.0  # after a refusal: how long unread input is drained before closing
LINGER_BYTES = 4 * MAX_BODY
MAX_PIPELINED = 64  # requests framed but not answered before reading pauses
REQUEST_ID_HEADER = "X-Toxiproxy-Request-Id"
READ_BUFFER = 64 << 10  # bytes one read of an API connection takes at most
GUARD_MEMO = 64  # (method, headers) pairs the browser guard's answers are kept for

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"


class ApiError(Exception):
    """An answer other than success: Toxiproxy's status code and ``error`` text."""

    def __init__(self, status: int, message: str, *, extra: dict[str, JsonValue] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra or {}


def bad_body(why: str) -> ApiError:
    return ApiError(400, f"bad request body: {why}")


def missing(field_name: str) -> ApiError:
    return ApiError(400, f"missing required field: {field_name}")


PROXY_NOT_FOUND = "proxy not found"
TOXIC_NOT_FOUND = "toxic not found"

_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    500: "Internal Server Error",
}


_STREAMS = frozenset(s.value for s in Stream)

# Toxiproxy's routes under /proxies/{name}: POST and PATCH both update (api.go).
_METHODS = {
    "": frozenset({"GET", "POST", "PATCH", "DELETE"}),
    "toxics": frozenset({"GET", "POST"}),
    "toxic": frozenset({"GET", "POST", "PATCH", "DELETE"}),
    "counters": frozenset({"GET"}),  # faultday's own
}


def _json(status: int, value: JsonValue) -> Reply:
    # pydantic-core's encoder: compact, UTF-8, ~10x json.dumps on these small bodies.
    return Reply(status, pydantic_core.to_json(value))


_VERSION = _json(200, {"version": TOXIPROXY_VERSION, "faultday": __version__})
_REQUEST_ID_PREFIX = REQUEST_ID_HEADER.encode() + b": "
_CLOSE = b"Connection: close\r\n"


@functools.lru_cache(maxsize=64)  # a few statuses and content types, rendered once each
def _status_head(status: int, content_type: str) -> bytes:
    """An answer's first lines, up to the value of its Content-Length."""
    reason = _REASONS.get(status, "Error")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: ".encode()
    )


def _error(exc: ApiError) -> Reply:
    return _json(exc.status, {"error": exc.message, "status": exc.status, **exc.extra})


def _parse(model: type[M], body: JsonValue) -> M:
    try:
        return validate(model, body)
    except ValidationError as exc:
        raise bad_body(validation_message(exc)) from exc


_B32HEX = "0123456789abcdefghijklmnopqrstuv"
# Every pair of base32hex digits (10 bits), so an id's tail is three lookups.
_B32HEX_PAIRS = tuple(a + b for a in _B32HEX for b in _B32HEX)


class _RequestIds:
    """Ids shaped as zerolog's xid (20 base32hex characters), one per answer.

    An xid is 4 bytes of time, 5 of machine and process, 3 of a counter. Its first
    14 digits hold the time and the first 38 bits of the middle part: they change
    once a second and are encoded then. The last 6 hold the middle part's last 2
    bits, the counter and 4 bits of padding (``base64.b32hexencode`` of the same 12
    bytes, as ``_encode`` writes it, gives the same id).
    """

    def __init__(self) -> None:
        self._stem = os.urandom(3) + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._count = int.from_bytes(os.urandom(3), "big")
        self._low = (self._stem[-1] & 3) << 28  # the stem's bits in the tail
        self._second = -1
        self._head = ""

    def next(self) -> str:
        self._count = count = (self._count + 1) & 0xFFFFFF
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._head = _encode(second, self._stem, 0)[:14]
        tail = self._low | count << 4
        pairs = _B32HEX_PAIRS
        return self._head + pairs[tail >> 20] + pairs[tail >> 10 & 1023] + pairs[tail & 1023]


def _encode(second: int, stem: bytes, count: int) -> str:
    """An xid as the standard encoder writes it (``_RequestIds`` writes the same, faster)."""
    raw = second.to_bytes(4, "big") + stem + count.to_bytes(3, "big")
    return base64.b32hexencode(raw).decode().rstrip("=").lower()


# ---- framing ---------------------------------------------------------------------------------
# The headers the browser guard reads; every other header is skipped while framing.
_GUARD_HEADERS = frozenset({b"user-agent", b"content-type", b"host", b"origin"})


@dataclass(slots=True)
class Request:
    method: str
    target: str
    # The _GUARD_HEADERS as sent: names lower-cased, repeats kept.
    guard: tuple[tuple[bytes, bytes], ...]
    body: bytes
    keep_alive: bool


@dataclass(slots=True)
class _Framer:
    """httptools callbacks: complete requests in ``done``; ``refused`` once framing failed."""

    done: list[Request] = field(default_factory=list)
    refused: ApiError | None = None
    expects_continue: bool = False  # curl sends Expect: 100-continue with bodies over 1 KiB
    _url: bytes = b""
    _guard: list[tuple[bytes, bytes]] = field(default_factory=list)
    _length: bytes = b""
    _continue: bool = False
    _body: list[bytes] = field(default_factory=list)
    _size: int = 0  # of the body so far
    _head: int = 0
    parser: httptools.HttpRequestParser = field(init=False)

    def __post_init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)

    def feed(self, data: bytes | memoryview) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An Upgrade/CONNECT request: answered as it is, then the connection closes.
            self.refused = self.refused or ApiError(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self.refused = self.refused or ApiError(400, f"bad request: {exc}")

    def _refuse(self, message: str) -> None:
        self.refused = ApiError(400, message)
        raise ValueError(message)  # stops llhttp: nothing after this byte is parsed

    # The callbacks run once per request piece: they keep only what a route reads. Each
    # costs a call from C, so there is no on_message_begin: on_message_complete resets.
    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head += len(url)
        if self._head > MAX_HEAD:
            self._refuse(f"request head over {MAX_HEAD} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value)
        if self._head > MAX_HEAD:
            self._refuse(f"request head over {MAX_HEAD} bytes")
        key = name.lower()
        if key in _GUARD_HEADERS:
            self._guard.append((key, value))
        elif key == b"content-length":
            self._length = value
        elif key == b"expect" and value.strip().lower() == b"100-continue":
            self._continue = True

    def on_headers_complete(self) -> None:
        # llhttp has checked the digits; only the size is left to refuse before reading.
        if self._length.isdigit() and int(self._length) > MAX_BODY:
            self._refuse(f"request body over {MAX_BODY} bytes")
        self.expects_continue = self._continue

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY:  # chunked bodies have no length up front
            self._refuse(f"request body over {MAX_BODY} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.expects_continue = False
        method = self.parser.get_method()
        self.done.append(
            Request(
                method=_METHOD_NAMES.get(method) or method.decode("latin-1"),
                target=self._url.decode("latin-1"),
                guard=tuple(self._guard),
                body=b"".join(self._body),
                keep_alive=self.parser.should_keep_alive(),
            )
        )
        self._url = b""
        self._guard = []
        self._length = b""
        self._continue = False
        self._body = []
        self._size = 0
        self._head = 0


_METHOD_NAMES = {m.encode(): m for m in ("GET", "POST", "PATCH", "PUT", "DELETE", "HEAD")}


# ---- JSON bodies -----------------------------------------------------------------------------
def _no_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not JSON")


def _depth(value: JsonValue) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
    return deepest


# json.loads builds a decoder per call when given an option; this one is built once.
_decode_json = json.JSONDecoder(parse_constant=_no_constant).decode


def decode_body(body: bytes) -> JsonValue:
    """The request's JSON; an empty body is Go's ``EOF`` (400), as in Toxiproxy."""
    if not body or body.isspace():
        raise bad_body("EOF")
    try:
        # pydantic-core's parser first: a fifth of the json module's time. What it
        # refuses (bad UTF-8 or JSON, NaN, deep nesting, an escaped lone surrogate) goes
        # to the json module, whose verdict and message stand; on what both accept they
        # agree (tests/proxy/test_proxy_api_http.py).
        value: JsonValue = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError:
        value = _decode_strictly(body)
    # Only a body with more brackets than MAX_DEPTH can nest that deep (the walk is not free).
    deep = body.count(b"[") + body.count(b"{") > MAX_DEPTH
    if deep and isinstance(value, dict | list) and _depth(value) > MAX_DEPTH:
        raise bad_body(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _object(value: JsonValue, what: str) -> dict[str, JsonValue]:
    # Go decodes ``null`` into a struct as "no fields given".
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_body(f"expected a JSON object ({what})")
    return value


def _decode_strictly(body: bytes) -> JsonValue:
    """The json module's reading of ``body``, or its reason for refusing it (a 400)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_body(f"invalid UTF-8 at byte {exc.start}") from exc
    try:
        value: JsonValue = _decode_json(text)
    except RecursionError as exc:
        raise bad_body(f"JSON nested deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity
        raise bad_body(f"invalid JSON: {exc}") from exc
    return value


# ---- addresses -------------------------------------------------------------------------------
async def resolve_listen(listen: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``host:port`` as an address, IPv4 first, as Go's ``net.ResolveTCPAddr`` does."""
    host, port = split_hostport(listen)
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host), port
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT
        )
    except (OSError, TimeoutError) as exc:
        raise ApiError(500, f"cannot resolve {listen}: {exc}") from exc
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return ipaddress.ip_address(infos[0][4][0]), port


async def same_listen(current: str, wanted: str, *, any_port: bool = False) -> bool:
    """Do two listen addresses name the same socket (``localhost:80`` is ``127.0.0.1:80``)?"""
    have, want = await resolve_listen(current), await resolve_listen(wanted)
    if any_port and want[1] == 0:  # asked for "any port" again: the one it got matches
        return have[0] == want[0]
    return have == want


def _path(target: str) -> list[str]:
    plain = "?" not in target and "#" not in target and "%" not in target
    if plain and target[:1] == "/" and target[:2] != "//":
        return [p for p in target.split("/") if p]  # what urlsplit would give, without it
    path = urlsplit(target).path
    return (
        [unquote(p) for p in path.split("/") if p]
        if "%" in path
        else [p for p in path.split("/") if p]
    )


def _check_hostport(value: str, what: str) -> None:
    try:
        split_hostport(value)
    except ValueError as exc:
        raise bad_body(f"{what}: {exc}") from exc


@dataclass(slots=True)
class _Step:
    """What ``POST /populate`` does with one proxy of the batch."""

    spec: ProxySpec
    existing: Proxy | None  # the proxy of that name now
    keep: bool = False  # unchanged (same upstream, same address): kept as it is
    reuse: bool = False  # replaced on the same address: the listening socket carries over
    sock: socket.socket | None = None  # bound for it before anything changes


# ---- connections ------------------------------------------------------------------------------
class _ApiConnection(asyncio.BufferedProtocol):
    """One client connection: llhttp framing, answers in order, bounded buffers.

    A protocol rather than streams: a route that acts at once (toxics, reads) is
    answered inside ``buffer_updated``, with no task switch; the routes that await
    (listening, resolving) run as a task, and the connection waits for them.
    Buffered: the transport reads into the handler's one buffer. A plain protocol
    gets a fresh 256 KiB ``bytes`` per read, which glibc maps and unmaps each time
    (three system calls, a page fault and a TLB shootdown to the relay's thread per
    API call).
    """

    def __init__(self, handler: ApiHandler) -> None:
        self.handler = handler
        self.framer = _Framer()
        self.pending: deque[Request] = deque()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.writable = True
        self.paused = False
        self.eof = False
        self.done = False  # its last answer is written: closing, or lingering after a refusal
        self.dropped = 0
        self.last = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None

    # ---- asyncio callbacks ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.handler.connections.add(self)
        self._arm(IDLE_TIMEOUT)

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.handler.buffer

    def buffer_updated(self, nbytes: int) -> None:
        # What was read is framed now, before the buffer is read into again.
        self.last = time.monotonic()
        if self.done:  # lingering after a refusal: dropped, never parsed
            self.dropped += nbytes
            if self.dropped > LINGER_BYTES:
                self.abort()
            return
        self.framer.feed(self.handler.buffer[:nbytes])
        if self.framer.expects_continue:
            self.framer.expects_continue = False
            # Only between answers: a 100 must not come before an earlier request's reply.
            if not self.pending and self.task is None and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self.framer.done:
            self.pending.extend(self.framer.done)
            self.framer.done.clear()
            if len(self.pending) > MAX_PIPELINED and not self.paused and self.transport:
                self.paused = True
                self.transport.pause_reading()
        self._pump()

    def eof_received(self) -> bool:
        self.eof = True
        busy = bool(self.pending) or self.task is not None
        return busy and not self.done  # True: stay open to write the pending answers

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self._pump()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # ---- answering ----------------------------------------------------------------------------
    def _pump(self) -> None:
        while self.pending and self.task is None and self.writable and not self.done:
            request = self.pending.popleft()
            reply = self.handler.answer_now(request)
            if reply is None:
                self.task = self.handler.server.loop.create_task(self._later(request))
                return
            self._reply(request, reply)
        if self.done or self.task is not None or self.pending or self.transport is None:
            return
        if self.framer.refused is not None:
            self._write(_error(self.framer.refused), close=True)
            self._linger()
        elif self.eof:
            self.done = True
            self.transport.close()
        elif self.paused:
            self.paused = False
            self.transport.resume_reading()

    async def _later(self, request: Request) -> None:
        try:
            reply = await self.handler.answer(request)
        finally:
            self.task = None
        self._reply(request, reply)
        self._pump()

    def _reply(self, request: Request, reply: Reply) -> None:
        self._write(reply, close=not request.keep_alive)
        if not request.keep_alive and self.transport is not None:
            self.done = True
            self.transport.close()

    def _write(self, reply: Reply, *, close: bool) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.handler.render(reply, close=close))

    def _linger(self) -> None:
        """Half-close and drop what the client still sends (bounded), then close.

        Closing with unread input makes the kernel send a reset, which can destroy
        the refusal before the client reads it. Nothing read after it is parsed.
        """
        self.done = True
        if self.transport is not None and self.transport.can_write_eof():
            self.transport.write_eof()
        self._arm(LINGER_TIMEOUT)

    # ---- timeouts -----------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.handler.server.loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        # One timer per connection, re-armed lazily: data arriving only moves ``last``.
        idle = time.monotonic() - self.last
        if self.done or (idle >= IDLE_TIMEOUT and self.task is None):
            self.abort()
        else:
            self._arm(max(IDLE_TIMEOUT - idle, 1.0))


# ---- the server ------------------------------------------------------------------------------
class ApiHandler:
    def __init__(self, server: ProxyServer, *, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.server = server
        self.allowed_hosts = allowed_hosts  # Host names beyond loopback (faultday_wire.webguard)
        self.connections: set[_ApiConnection] = set()
        self._ids = _RequestIds()
        # Every connection reads into this one buffer (asyncio.BufferedProtocol): each
        # read is framed before the loop reads again, and llhttp copies what it keeps.
        self.buffer = memoryview(bytearray(READ_BUFFER))
        # The guard's answers by (method, its headers): check_request is pure, and a
        # client sends the same headers on every call. Cleared when full.
        self._guarded: dict[tuple[str, tuple[tuple[bytes, bytes], ...]], Refusal | None] = {}

    def connection(self) -> asyncio.BaseProtocol:
        """The protocol factory for ``loop.create_server``."""
        return _ApiConnection(self)

    async def close(self) -> None:
        """Drop open API connections (their running requests are cancelled)."""
        for conn in list(self.connections):
            conn.abort()
        await asyncio.sleep(0)  # let connection_lost run

    def render(self, reply: Reply, *, close: bool) -> bytes:
        head = _status_head(reply.status, reply.content_type)
        return b"%s%d\r\n%s%s\r\n%s\r\n%s" % (
            head,
            len(reply.body),
            _REQUEST_ID_PREFIX,
            self._ids.next().encode(),
            _CLOSE if close else b"",
            reply.body,
        )

    def guard(self, request: Request) -> Refusal | None:
        """The browser guard's answer (faultday_wire.webguard): all four rules, every route."""
        key = (request.method, request.guard)
        try:
            return self._guarded[key]
        except KeyError:
            pass
        refusal = check_request(
            request.method,
            request.guard,
            listen_host=self.server.host,
            allowed_hosts=self.allowed_hosts,
        )
        if len(self._guarded) >= GUARD_MEMO:
            self._guarded.clear()
        self._guarded[key] = refusal
        return refusal

    def answer_now(self, request: Request) -> Reply | None:
        """The reply, when the route acts at once; None for a route that must await."""
        # Every route creates relays or changes them: all four browser rules, everywhere.
        refusal = self.guard(request)
        if refusal is not None:
            return _error(ApiError(refusal.status, refusal.message))
        try:
            return self._route_now(request.method, _path(request.target), request.body)
        except ApiError as exc:
            return _error(exc)
        except ProxyError as exc:
            return _error(ApiError(500, str(exc)))

    async def answer(self, request: Request) -> Reply:
        """One request's reply (any exception a client can cause is a 4xx/5xx here)."""
        now = self.answer_now(request)
        if now is not None:
            return now
        try:
            return await self._route_later(request.method, _path(request.target), request.body)
        except ApiError as exc:
            return _error(exc)
        except ProxyError as exc:
            return _error(ApiError(500, str(exc)))

    def _route_now(self, method: str, parts: list[str], body: bytes) -> Reply | None:
        if parts == ["version"] and method == "GET":
            return _VERSION
        if parts == ["metrics"] and method == "GET":
            return Reply(200, render_metrics(self.server), "text/plain; version=0.0.4")
        if parts in (["reset"], ["populate"]) and method == "POST":
            return None
        if parts == ["proxies"]:
            if method == "GET":
                return _json(200, {k: p.to_json() for k, p in self.server.proxies.items()})
            if method == "POST":
                return None
            raise ApiError(405, "method not allowed")
        if len(parts) >= 2 and parts[0] == "proxies":
            return self._proxy_route(method, parts[1], parts[2:], body)
        raise ApiError(404, "not found")

    async def _route_later(self, method: str, parts: list[str], body: bytes) -> Reply:
        """The routes ``_route_now`` left (it has checked method, path and proxy)."""
        if parts == ["reset"]:
            return await self._reset()
        if parts == ["populate"]:
            return await self._populate(decode_body(body))
        if parts == ["proxies"]:
            return _json(201, (await self._create(decode_body(body))).to_json())
        proxy = self._proxy(parts[1])
        return _json(200, (await self._update(proxy, decode_body(body))).to_json())

    def _proxy_route(  # noqa: PLR0911 - a flat route table reads best
        self, method: str, name: str, rest: list[str], body: bytes
    ) -> Reply | None:
        shape = "toxic" if len(rest) == 2 and rest[0] == "toxics" else "/".join(rest)
        allowed = _METHODS.get(shape)
        if allowed is None:
            raise ApiError(404, "not found")
        if method not in allowed:
            raise ApiError(405, "method not allowed")
        proxy = self._proxy(name)
        if shape == "":
            if method == "GET":
                return _json(200, proxy.to_json())
            if method == "DELETE":
                proxy.stop()
                self.server.proxies.pop(proxy.name, None)
                return Reply(204)
            return None  # an update: it may listen and resolve
        if shape == "counters":
            return _json(200, proxy.counters.snapshot(proxy.name).to_json())
        if shape == "toxics":
            if method == "GET":
                return _json(200, [t.to_json() for t in proxy.toxics])
            return _json(200, self._add_toxic(proxy, decode_body(body)).to_json())
        toxic = proxy.toxic(rest[1])
        if toxic is None:
            raise ApiError(404, TOXIC_NOT_FOUND)
        if method == "GET":
            return _json(200, toxic.to_json())
        if method == "DELETE":
            proxy.remove_toxic(toxic)
            return Reply(204)
        return _json(200, self._update_toxic(proxy, toxic, decode_body(body)).to_json())

    def _proxy(self, name: str) -> Proxy:
        proxy = self.server.proxies.get(name)
        if proxy is None:
            raise ApiError(404, PROXY_NOT_FOUND)
        return proxy

    # ---- proxies ------------------------------------------------------------------------------
    @staticmethod
    def _proxy_spec(data: JsonValue, where: str = "") -> ProxySpec:
        raw = _object(data, "a proxy")
        for key in ("name", "upstream"):
            if raw.get(key) in (None, ""):
                raise missing(key + where)
        spec = _parse(ProxySpec, raw)
        _check_hostport(spec.listen, "listen")
        _check_hostport(spec.upstream, "upstream")
        return spec

    async def _create(self, data: JsonValue) -> Proxy:
        return await self.create(self._proxy_spec(data))

    async def create(self, spec: ProxySpec) -> Proxy:
        """Create (and start, when enabled) one proxy; ApiError 409 when the name is taken."""
        if spec.name in self.server.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = Proxy(
            self.server.loop,
            spec,
            self.server.relay,
            self.server.native_id(),
            tracing=self.server.tracing,
        )
        if spec.enabled:
            await proxy.start()
        self.server.proxies[spec.name] = proxy
        return proxy

    async def _update(self, proxy: Proxy, data: JsonValue) -> Proxy:
        """Toxiproxy's update, all or nothing: a listen that fails leaves the proxy as it was."""
        upd = _parse(ProxyUpdate, _object(data, "a proxy"))
        listen = upd.listen or proxy.listen
        upstream = proxy.upstream if upd.upstream is None else upd.upstream
        enabled = proxy.enabled if upd.enabled is None else upd.enabled
        if not upstream:
            raise missing("upstream")
        _check_hostport(listen, "listen")
        _check_hostport(upstream, "upstream")
        moved = not await same_listen(proxy.listen, listen)
        differs = moved or upstream != proxy.upstream
        sock: socket.socket | None = None
        if enabled and moved and proxy.enabled:
            sock = await self._bind_moving(proxy, listen)
        elif enabled and (moved or not proxy.enabled):
            sock = bind_listener(listen)
        elif enabled and differs:
            sock = proxy.take_listener()  # same address, new upstream: keep the listener
        # Nothing below can fail: the proxy changes only once its new socket is bound.
        if differs or not enabled:
            proxy.stop()
        if differs:
            proxy.listen = listen
            proxy.set_upstream(upstream)
        if enabled and sock is not None:
            await proxy.start(sock)
        return proxy

    @staticmethod
    async def _bind_moving(proxy: Proxy, listen: str) -> socket.socket:
        """A socket on ``listen`` for an enabled proxy; on failure it still serves as before."""
        try:
            return bind_listener(listen)
        except ProxyError:
            if split_hostport(listen)[1] != split_hostport(proxy.listen)[1]:
                raise
        # Same port, another host (127.0.0.1:N -> 0.0.0.0:N): the proxy's own socket may
        # be what is in the way. Close it, try, and rebind the old address if that fails.
        old = proxy.take_listener()
        if old is not None:
            old.close()
        try:
            return bind_listener(listen)
        except ProxyError:
            proxy.enabled = False
            await proxy.start()  # the address it held a moment ago
            raise

    async def _reset(self) -> Reply:
        for proxy in self.server.proxies.values():
            if not proxy.enabled:
                await proxy.start()
            proxy.clear_toxics()
        return Reply(204)

    async def _populate(self, data: JsonValue) -> Reply:
        """Create or replace many proxies, all or nothing (Toxiproxy 2.12 keeps the first ones)."""
        items = data.get("proxies") if isinstance(data, dict) else data
        if not isinstance(items, list | None):
            raise bad_body("expected a JSON array of proxies")
        specs = [self._proxy_spec(item, f" at proxy {i}") for i, item in enumerate(items or [], 1)]
        names = [s.name for s in specs]
        for i, name in enumerate(names, 1):
            if names.index(name) + 1 != i:
                raise bad_body(f"duplicate name {name!r} at proxy {i}")
        steps = [await self._plan(spec) for spec in specs]
        try:
            for step in steps:
                if step.spec.enabled and not (step.keep or step.reuse):
                    step.sock = bind_listener(step.spec.listen)
        except ProxyError as exc:
            for step in steps:
                if step.sock is not None:
                    step.sock.close()
            raise ApiError(500, str(exc), extra={"proxies": []}) from exc
        # Every new socket is bound: nothing below can fail.
        return _json(201, {"proxies": [(await self._apply(step)).to_json() for step in steps]})

    async def _plan(self, spec: ProxySpec) -> _Step:
        existing = self.server.proxies.get(spec.name)
        if existing is None:
            return _Step(spec, None)
        if existing.upstream == spec.upstream and await same_listen(
            existing.listen, spec.listen, any_port=True
        ):
            return _Step(spec, existing, keep=True)
        reuse = (
            spec.enabled and existing.enabled and await same_listen(existing.listen, spec.listen)
        )
        return _Step(spec, existing, reuse=reuse)

    async def _apply(self, step: _Step) -> Proxy:
        if step.keep and step.existing is not None:
            return step.existing  # unchanged: toxics, connections and state kept, as Toxiproxy
        sock = step.sock
        if step.existing is not None:  # replaced, as Toxiproxy does: its toxics go too
            if step.reuse:
                sock = step.existing.take_listener()
            step.existing.stop()
        proxy = Proxy(
            self.server.loop,
            step.spec,
            self.server.relay,
            self.server.native_id(),
            tracing=self.server.tracing,
        )
        if step.spec.enabled:
            await proxy.start(sock)
        self.server.proxies[step.spec.name] = proxy
        return proxy

    # ---- toxics -------------------------------------------------------------------------------
    def _add_toxic(self, proxy: Proxy, data: JsonValue) -> Toxic:
        raw = dict(_object(data, "a toxic"))
        stream = raw.get("stream") or Stream.DOWNSTREAM.value
        if not isinstance(stream, str) or stream.lower() not in _STREAMS:
            raise ApiError(400, "stream was invalid, can be either upstream or downstream")
        raw["stream"] = stream.lower()
        if raw.get("type") not in ATTRS:
            raise ApiError(400, "invalid toxic type")
        spec = _parse(ToxicSpec, raw)
        if proxy.toxic(spec.resolved_name()) is not None:
            raise ApiError(409, "toxic already exists")
        toxic = Toxic(spec, self._attrs(spec))
        proxy.add_toxic(toxic)
        return toxic

    def _update_toxic(self, proxy: Proxy, toxic: Toxic, data: JsonValue) -> Toxic:
        """Toxiproxy's update: attributes merged, toxicity when given; name, type, stream kept."""
        raw = _object(data, "a toxic")
        attrs = raw.get("attributes")
        if attrs is not None and not isinstance(attrs, dict):
            raise bad_body("attributes: expected a JSON object")
        spec = _parse(
            ToxicSpec,
            {
                "name": toxic.name,
                "type": toxic.type,
                "stream": toxic.stream.value,
                "toxicity": raw.get("toxicity", toxic.toxicity),
                "attributes": {**dump_attributes(toxic.attrs), **(attrs or {})},
            },
        )
        toxic.attrs = self._attrs(spec)
        toxic.toxicity = spec.toxicity
        proxy.notify()
        return toxic

    @staticmethod
    def _attrs(spec: ToxicSpec) -> BaseModel:
        try:
            return spec.parsed_attributes()
        except ValidationError as exc:
            raise bad_body(f"attributes: {validation_message(exc)}") from exc
