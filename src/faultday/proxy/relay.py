"""One proxied connection: the native relay, a zero-copy fast path and a toxic path.

Where the native relay is built, a connection on which only its toxics act
(``toxics.relays_natively``) is handed to it (``Connection.go_native``) and no
Python runs for it until the toxics change. Otherwise, with no toxic acting on
a direction, bytes move socket → pipe → socket with
``splice(2)`` from selector callbacks: no copy through Python and no task.
When a toxic applies, that direction switches (mid-connection) to a pump task
that reads into a buffer, frames HTTP when the connection speaks it, and runs
the toxic chain; when the last toxic goes, it switches back. Connections whose
first client bytes are an HTTP/1.x request always take the pump so requests
and responses are counted and HTTP/SSE toxics can act at message boundaries.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import random
import re
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from faultday.proxy import http1
from faultday.proxy.models import (
    BandwidthAttrs,
    HttpErrorAttrs,
    HttpLatencyAttrs,
    LatencyAttrs,
    LimitDataAttrs,
    ResetPeerAttrs,
    SlicerAttrs,
    SlowCloseAttrs,
    Stream,
    StreamCutAttrs,
    StreamDripAttrs,
    StreamStallAttrs,
    TimeoutAttrs,
)
from faultday.proxy.toxics import (
    Link,
    Toxic,
    applies,
    limit_left,
    limit_link,
    native_timing,
    relays_natively,
    slice_sizes,
)
from faultday.proxy.tracing import (
    CLIENT_CLOSED,
    CONNECTION_CLOSED,
    NOT_HTTP,
    UPSTREAM_CLOSED,
    RequestSpan,
    ToxicView,
)

if TYPE_CHECKING:
    from faultday.proxy.native import DirectionState, Released
    from faultday.proxy.server import Proxy

log = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20
RECV_SIZE = 256 * 1024
INBOX_LIMIT = 4 << 20  # bytes buffered before reading pauses (backpressure)
# Timed waits end this much early: select()'s timer slack (50 µs) plus the
# wake-up of a sleeping process (a vCPU leaving idle on a VM) otherwise make
# every injected delay ~0.2 ms late on average (bench/proxy, 2-vCPU VM).
TIMER_LEAD = 200e-6
# A latency toxic's last 1.5 ms is polled, not slept (see Direction._sleep_until):
# timer wake-ups here are 0.1 ms late at p50 and 0.7-0.9 ms at p99 (bench/proxy).
SPIN_LEAD = 1.5e-3
_SPLICE_FLAGS = 0x01 | 0x02  # SPLICE_F_MOVE | SPLICE_F_NONBLOCK
_F_SETPIPE_SZ = 1031
_splice = os.splice
_DISCARD = bytearray(1)  # MSG_TRUNC on TCP discards without copying: no real buffer needed
_SSE_SLICE = 512  # bytes of an SSE body given to split_events at a time
_HTTP_START = re.compile(rb"^[A-Z]{3,10} ")
_METHODS = (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")


class Kind(StrEnum):
    UNKNOWN = "unknown"
    TCP = "tcp"
    HTTP = "http"


class Mode(StrEnum):
    FAST = "fast"
    PUMP = "pump"
    DONE = "done"


class ConnectionGone(Exception):
    """The connection was closed (by a toxic, a peer or the proxy); stop pumping."""


def _looks_http(first: bytes) -> bool:
    # Clients write a request line in one go; a first segment too short to show
    # "METHOD " is treated as not HTTP rather than waited on.
    return bool(_HTTP_START.match(first)) and first.split(b" ", 1)[0] in _METHODS


class PipePool:
    """Empty pipes kept for reuse: creating and sizing one costs three syscalls per direction."""

    def __init__(self, limit: int = 128) -> None:
        self.limit = limit
        self._free: list[tuple[int, int]] = []

    def get(self) -> tuple[int, int]:
        if self._free:
            return self._free.pop()
        pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe[1], _F_SETPIPE_SZ, PIPE_SIZE)
        return pipe

    def put(self, pipe: tuple[int, int], *, empty: bool) -> None:
        if empty and len(self._free) < self.limit:
            self._free.append(pipe)
        else:
            os.close(pipe[0])
            os.close(pipe[1])

    def close(self) -> None:
        while self._free:
            r, w = self._free.pop()
            os.close(r)
            os.close(w)


def _discard_input(sock: socket.socket) -> None:
    """Drop what waits to be read (bounded: a peer may keep sending)."""
    for _ in range(16):
        try:
            if not sock.recv_into(_DISCARD, len(_DISCARD), socket.MSG_DONTWAIT | socket.MSG_TRUNC):
                return
        except OSError:
            return


def _rst(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Connection:
    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.loop = proxy.loop
        self.client = client
        self.upstream = upstream
        self.kind = Kind.UNKNOWN
        self.closed = False
        self.native = False  # the native relay holds its sockets (see Proxy.native_conns)
        self.links: dict[int, Link] = {}
        # The limit_data links the relay counts for, while it holds the connection.
        self.native_limits: tuple[Link | None, Link | None] = (None, None)
        self.up = Direction(self, client, upstream, Stream.UPSTREAM)
        self.down = Direction(self, upstream, client, Stream.DOWNSTREAM)
        # HTTP: what answers each forwarded/refused request, in order; None = the
        # upstream server, bytes = a response the proxy writes itself.
        self.expect: deque[bytes | None] = deque()
        # Traced requests whose response has not ended, in order (as ``expect``).
        self.tracing = proxy.tracing
        self.spans: deque[RequestSpan] = deque()

    def start(self) -> None:
        if self.go_native(None):
            return
        self.up.start()
        self.down.start()

    def rebind(self, released: Released) -> None:
        """The native relay handed this tracked connection back: its new socket objects."""
        client, upstream = released.client, released.upstream
        self.client, self.upstream = client, upstream
        self.native = False
        for link, state in zip(self.native_limits, (released.up, released.down), strict=True):
            if link is not None:
                link.passed += state.limited  # what the relay let through counts on
        self.native_limits = (None, None)
        self.links = {k: lk for k, lk in self.links.items() if lk.toxic.active}
        self.up = Direction(self, client, upstream, Stream.UPSTREAM)
        self.down = Direction(self, upstream, client, Stream.DOWNSTREAM)

    def go_native(self, state: Released | None) -> bool:
        """Hand this connection to the native relay if it can apply every toxic acting on it."""
        proxy = self.proxy
        relay, counters = proxy.relay, proxy.counters.native
        if relay is None or counters is None or self.kind is Kind.HTTP:
            return False
        if state is not None and any(d.eof or d.done for d in (state.up, state.down)):
            return False  # a half-closed connection finishes where it is
        up, down = self.chain(Stream.UPSTREAM), self.chain(Stream.DOWNSTREAM)
        if not (relays_natively(up) and relays_natively(down)):
            return False
        limits = (limit_link(up), limit_link(down))
        if state is not None and any(
            lk is not None and d.in_pipe > limit_left(lk)
            for lk, d in zip(limits, (state.up, state.down), strict=True)
        ):
            return False  # bytes read before limit_data came exceed it: Python counts them
        conn_id = proxy.next_conn_id() if proxy.toxics else 0  # untracked: nothing to redo
        if not relay.adopt(
            proxy.native_id,
            self.client,
            self.upstream,
            counters,
            conn_id=conn_id,
            timing=(native_timing(up), native_timing(down)),
            state=state,
        ):
            return False
        self.native = True
        self.native_limits = limits
        proxy.went_native(self, conn_id)
        return True

    def resume(self, released: Released, *, http: bool) -> None:
        """Carry on a connection the native relay relayed until now."""
        if not http and released.kind:
            self.kind = Kind.TCP
        if not http and self.go_native(released):
            return
        self.up.restore(released.up)
        self.down.restore(released.down)
        if http:
            self.become_http()  # the relay only peeked: no byte of it has moved
        elif released.kind:
            self.kind = Kind.TCP
        for direction in (self.up, self.down):
            direction.resume()
        self.direction_done()

    def link(self, toxic: Toxic) -> Link:
        link = self.links.get(id(toxic))
        if link is None or link.toxic is not toxic:
            link = self.links[id(toxic)] = Link.roll(toxic)
        return link

    def chain(self, stream: Stream) -> list[Link]:
        http = self.kind is Kind.HTTP
        links = [self.link(t) for t in self.proxy.toxics if applies(t, stream, http=http)]
        return [lk for lk in links if lk.enabled]

    def toxics_changed(self) -> None:
        if self.closed or self.native:  # the proxy takes native ones back itself
            return
        # Forget removed toxics, or a long-lived connection collects one link per change.
        self.links = {k: lk for k, lk in self.links.items() if lk.toxic.active}
        for direction in (self.up, self.down):
            direction.toxics_changed()

    def become_http(self) -> None:
        self.kind = Kind.HTTP
        for direction in (self.up, self.down):
            direction.framer = http1.Framer(response=direction.stream is Stream.DOWNSTREAM)
            if direction.mode is Mode.FAST:
                direction.to_pump()

    def direction_done(self) -> None:
        if self.up.mode is Mode.DONE and self.down.mode is Mode.DONE:
            self.close()

    def toxic_views(self) -> tuple[ToxicView, ...]:
        """The toxics in force on this connection's next request, as its span shows them."""
        toxics = self.proxy.toxics
        if not toxics:
            return ()
        now = time.monotonic()
        http = self.kind is Kind.HTTP
        return tuple(
            t.view()
            for t in toxics
            if (applies(t, Stream.UPSTREAM, http=http) or applies(t, Stream.DOWNSTREAM, http=http))
            and self.link(t).live
            and t.within_limits(now)
        )

    def end_span(self, span: RequestSpan) -> None:
        tracing = self.tracing
        assert tracing is not None
        proxy = self.proxy
        tracing.end(span, name=proxy.span_name, edge=proxy.name, upstream=proxy.upstream)

    def fail_spans(self, why: str) -> None:
        """End every traced request still waiting for (the rest of) its response."""
        for direction in (self.up, self.down):
            self.spans.extendleft(reversed(direction.ending))  # their last write never happened
            direction.ending.clear()
            direction.emit_span = None
            direction.final = False
        while self.spans:
            span = self.spans.popleft()
            span.error = span.error or why
            self.end_span(span)

    def close(self, *, reset: bool = False, why: str = "") -> None:
        """Close both sides; ``why``: what closed it (a toxic's type), for the spans it cuts."""
        if self.closed:
            return
        self.closed = True
        if self.spans:
            if not why:
                why = (
                    UPSTREAM_CLOSED
                    if self.down.eof
                    else CLIENT_CLOSED
                    if self.up.eof
                    else CONNECTION_CLOSED
                )
            self.fail_spans(why)
        for direction in (self.up, self.down):
            direction.stop()
        for sock in (self.client, self.upstream):
            if reset:
                _rst(sock)
            sock.close()
        self.proxy.connection_closed(self)


class Direction:
    """One direction (client→upstream or upstream→client) of a connection."""

    def __init__(
        self, conn: Connection, src: socket.socket, dst: socket.socket, stream: Stream
    ) -> None:
        self.conn = conn
        self.loop = conn.loop
        self.src, self.dst = src, dst
        self.src_fd, self.dst_fd = src.fileno(), dst.fileno()
        self.stream = stream
        self.idx = 0 if stream is Stream.UPSTREAM else 1
        self.counters = conn.proxy.counters
        self.mode = Mode.FAST
        self.eof = False
        self.pipe: tuple[int, int] | None = None
        self.in_pipe = 0
        self.reading = False
        self.writing = False
        self.inbox: deque[tuple[float, bytes]] = deque()
        self.inbox_bytes = 0
        self.task: asyncio.Task[None] | None = None
        self.wakeup: asyncio.Future[None] | None = None
        self.framer: http1.Framer | None = None
        self.dropping = False  # a refused request's body is being discarded
        self.sse: _SseState | None = None
        # HTTP: what one read's messages emit, written at once when no toxic stands
        # between (a head and its body were two writes); flushed before any hold.
        self.coalesce = False
        self.out = bytearray()
        # Tracing only: the request being read (upstream), the response being relayed
        # (downstream) and whether its final head came, spans whose end awaits a flush.
        self.req_span: RequestSpan | None = None
        self.emit_span: RequestSpan | None = None
        self.final = False
        self.ending: list[RequestSpan] = []

    # ---- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        if self.conn.chain(self.stream):
            self.to_pump()
        else:
            self._read_on(self._fast_readable)

    def stop(self) -> None:
        self._read_off()
        self._write_off()
        self.mode = Mode.DONE
        if self.pipe is not None:
            self.conn.proxy.pipes.put(self.pipe, empty=self.in_pipe == 0)
            self.pipe = None
            self.in_pipe = 0
        if self.task is not None and self.task is not asyncio.current_task(self.loop):
            self.task.cancel()
        self._wake()

    def _finish(self) -> None:
        """Source ended and everything was passed on: half-close the destination."""
        self._read_off()
        self._write_off()
        self.mode = Mode.DONE
        with contextlib.suppress(OSError):
            self.dst.shutdown(socket.SHUT_WR)
        self.conn.direction_done()

    def restore(self, state: DirectionState) -> None:
        self.pipe, self.in_pipe, self.eof = state.pipe, state.in_pipe, state.eof
        if state.done:
            self.mode = Mode.DONE

    def resume(self) -> None:
        if self.mode is not Mode.FAST:
            return
        if self.conn.chain(self.stream):
            self.to_pump()
        elif self.in_pipe:
            self._arm_writer()  # flushes, then reads again (or half-closes at EOF)
        elif self.eof:
            self._finish()
        else:
            self._read_on(self._fast_readable)

    def toxics_changed(self) -> None:
        if self.mode is Mode.FAST and self.conn.chain(self.stream):
            self.to_pump()
        self._wake()

    def _read_on(self, callback: Callable[[], object]) -> None:
        self.loop.add_reader(self.src_fd, callback)
        self.reading = True

    def _read_off(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.src_fd)
            self.reading = False

    def _write_off(self) -> None:
        if self.writing:
            self.loop.remove_writer(self.dst_fd)
            self.writing = False

    # ---- fast path: splice(2) --------------------------------------------------------
    def _classify(self) -> bool:
        """Decide TCP vs HTTP from the client's first bytes; False = wait for more."""
        if self.stream is Stream.DOWNSTREAM:
            self.conn.kind = Kind.TCP  # the server spoke first: not HTTP
            return True
        try:
            peek = self.src.recv(16, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        except OSError:
            self.conn.close()
            return False
        if _looks_http(peek):
            self.conn.become_http()
            return False
        self.conn.kind = Kind.TCP
        return True

    def _fast_readable(self) -> None:
        if self.conn.kind is Kind.UNKNOWN and not self._classify():
            return
        if self.pipe is None:
            self.pipe = self.conn.proxy.pipes.get()
        # From now on the leaner callback; this one only ran to classify.
        self._read_off()
        self._read_on(self._relay)
        self._relay()

    def _relay(self) -> None:
        """The hot path: one splice in, one splice out, no other Python calls."""
        pipe = self.pipe
        assert pipe is not None
        try:
            n = _splice(self.src_fd, pipe[1], PIPE_SIZE, None, None, _SPLICE_FLAGS)
        except BlockingIOError:
            return
        except OSError:
            self.conn.close()
            return
        if not n:
            self._fast_eof()
            return
        counters = self.counters
        counters.received[self.idx] += n
        try:
            sent = _splice(pipe[0], self.dst_fd, n, None, None, _SPLICE_FLAGS)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.conn.close()
            return
        counters.sent[self.idx] += sent
        if sent < n:
            self.in_pipe = n - sent
            self._arm_writer()

    def _fast_eof(self) -> None:
        self.eof = True
        self._read_off()
        if not self.in_pipe:
            self._finish()

    def _arm_writer(self) -> None:
        if not self.writing:
            self._read_off()
            self.loop.add_writer(self.dst_fd, self._fast_flush)
            self.writing = True

    def _fast_flush(self) -> None:
        while self.in_pipe:
            assert self.pipe is not None
            try:
                n = os.splice(self.pipe[0], self.dst_fd, self.in_pipe, None, None, _SPLICE_FLAGS)
            except BlockingIOError:
                self._arm_writer()
                return
            except OSError:
                self.conn.close()
                return
            self.in_pipe -= n
            self.counters.sent[self.idx] += n
        if self.writing:
            self._write_off()
            if not self.eof and self.mode is Mode.FAST:
                self._read_on(self._relay)
        if self.eof:
            self._finish()

    # ---- pump path -------------------------------------------------------------------
    def to_pump(self) -> None:
        if self.mode is not Mode.FAST:
            return
        self._read_off()
        self._write_off()
        self.mode = Mode.PUMP
        # Bytes already taken from the source go first, through the toxics.
        while self.pipe is not None and self.in_pipe:
            data = os.read(self.pipe[0], self.in_pipe)
            self.in_pipe -= len(data)
            self._push(data)
        if not self.eof:
            self._read_on(self._pump_readable)
        self.task = self.loop.create_task(self._pump())

    def _to_fast(self) -> None:
        self.mode = Mode.FAST
        self.task = None
        if self.eof:
            self._finish()
        else:
            self._read_on(self._fast_readable)

    def _push(self, data: bytes) -> None:
        self.inbox.append((time.monotonic(), data))
        self.inbox_bytes += len(data)

    def _pump_readable(self) -> None:
        try:
            data = self.src.recv(RECV_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
            self._read_off()
        else:
            self.counters.received[self.idx] += len(data)
            self._push(data)
            if self.inbox_bytes > INBOX_LIMIT:
                self._read_off()
        self._wake()

    def _wake(self) -> None:
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    async def _wait(self, limit: float | None) -> None:
        """Until new bytes, a toxic change, a peer's action or ``limit`` seconds."""
        # Callbacks, not asyncio.wait(): that built a set, a task-waiter and a timer per
        # idle moment, twice per HTTP request (a sixth of the proxy's time in a profile).
        changed = self.conn.proxy.changed
        if changed.done():
            return
        self.wakeup = self.loop.create_future()
        changed.add_done_callback(self._on_changed)
        timer = None if limit is None else self.loop.call_later(limit, self._wake)
        try:
            await self.wakeup
        finally:
            self.wakeup = None
            changed.remove_done_callback(self._on_changed)
            if timer is not None:
                timer.cancel()

    def _on_changed(self, _changed: asyncio.Future[None]) -> None:
        self._wake()

    async def _sleep_until(self, deadline: float, *, precise: bool = False) -> bool:
        """Sleep until ``deadline`` (monotonic); False when a toxic change cut it short.

        ``precise``: an injected delay the user asked for by the millisecond. Its last
        ``SPIN_LEAD`` is polled through the loop (other connections still run) rather
        than left to a timer, whose wake-up on a VM strays up to ~1 ms; never early.
        """
        await self._flush_out()  # what came before the held data is not held with it
        changed = self.conn.proxy.changed
        now = time.monotonic()
        spin = precise and self.conn.proxy.spin.take(min(SPIN_LEAD, max(0.0, deadline - now)))
        delay = deadline - now - (SPIN_LEAD if spin else TIMER_LEAD)
        if delay > 0:
            done, _ = await asyncio.wait({changed}, timeout=delay)
            if done:
                return False
        while spin and time.monotonic() < deadline:
            await asyncio.sleep(0)
            if changed.done():
                return False
        return True

    async def _pump(self) -> None:
        try:
            await self._pump_loop()
        except ConnectionGone:
            pass
        except OSError as exc:
            log.debug("connection error on %s: %s", self.conn.proxy.name, exc)
            self.conn.close()
        except asyncio.CancelledError:
            pass
        except Exception:
            # A bug here must not leave a silent, half-dead connection behind.
            log.exception("proxy %s: relay failed; closing the connection", self.conn.proxy.name)
            self.conn.close(reset=True)

    async def _pump_loop(self) -> None:
        while not self.conn.closed:
            if self.conn.kind is Kind.HTTP and self.stream is Stream.DOWNSTREAM:
                await self._answer_refused()
            if self.inbox:
                ts, data = self.inbox.popleft()
                self.inbox_bytes -= len(data)
                if not self.reading and not self.eof and self.inbox_bytes <= INBOX_LIMIT // 2:
                    self._read_on(self._pump_readable)
                await self._process(ts, data)
                continue
            chain = self.conn.chain(self.stream)
            if self.eof:
                await self._at_eof(chain)
                return
            if not chain and self.conn.kind is not Kind.HTTP:
                self._to_fast()
                return
            await self._idle(chain)

    async def _idle(self, chain: list[Link]) -> None:
        """Wait for data; a timeout toxic acts on its own clock, data or not."""
        now = time.monotonic()
        wait: float | None = None
        for link in chain:
            attrs = link.toxic.attrs
            if isinstance(attrs, TimeoutAttrs) and attrs.timeout > 0 and link.live:
                left = link.attached + attrs.timeout / 1000.0 - now
                if left <= 0:
                    self._timer_fired(link)
                wait = left if wait is None else min(wait, left)
        await self._wait(wait)

    def _timer_fired(self, link: Link) -> None:
        self.counters.acted(link.toxic.type)
        self.conn.close(reset=link.toxic.type == "reset_peer", why=link.toxic.type)
        raise ConnectionGone

    async def _at_eof(self, chain: list[Link]) -> None:
        if self.framer is not None:
            for event in self.framer.eof():
                await self._http_event(time.monotonic(), event)
            if self.conn.spans and self.stream is Stream.DOWNSTREAM:
                self.conn.fail_spans(UPSTREAM_CLOSED)  # no (whole) response will come
        for link in chain:
            if isinstance(link.toxic.attrs, SlowCloseAttrs) and link.live:
                deadline = time.monotonic() + link.toxic.attrs.delay / 1000.0
                while link.live and not await self._sleep_until(deadline):
                    pass
        self._finish()

    async def _process(self, ts: float, data: bytes) -> None:
        if self.conn.kind is Kind.UNKNOWN:
            # Reached the pump before the fast path could look (a toxic was there first).
            if self.stream is Stream.UPSTREAM and _looks_http(data[:16]):
                self.conn.become_http()
            else:
                self.conn.kind = Kind.TCP
        framer = self.framer
        if framer is None or framer.raw:
            await self._emit(ts, data)
            return
        try:
            events = framer.feed(data)
        except http1.HttpProtocolError as exc:
            log.info("%s: not HTTP any more (%s); relaying raw", self.conn.proxy.name, exc)
            if self.conn.spans and self.stream is Stream.DOWNSTREAM:
                self.conn.fail_spans(NOT_HTTP)
            await self._emit(ts, framer.fail())
            return
        self.coalesce = True
        try:
            for event in events:
                await self._http_event(ts, event)
        finally:
            self.coalesce = False
        await self._flush_out()
        if self.ending:
            for span in self.ending:
                self.conn.end_span(span)
            self.ending.clear()

    async def _flush_out(self) -> None:
        if self.out:
            data = bytes(self.out)
            self.out.clear()
            await self._write(data)

    # ---- HTTP ------------------------------------------------------------------------
    async def _http_event(self, ts: float, event: http1.Event) -> None:
        if self.stream is Stream.UPSTREAM:
            await self._request_event(ts, event)
        else:
            await self._response_event(ts, event)

    async def _request_event(self, ts: float, event: http1.Event) -> None:
        if isinstance(event, http1.Head):
            self.counters.http_requests += 1
            await self._request_head(ts, event)
        elif isinstance(event, http1.Body | http1.End):
            if self.req_span is not None:
                self.req_span.request_bytes += len(http1.encode(event))
                if isinstance(event, http1.End):
                    self.req_span = None
            if self.dropping:
                if isinstance(event, http1.End):
                    self.dropping = False
                    self.conn.down._wake()
                return
            await self._emit(ts, http1.encode(event))
        else:
            await self._emit(ts, event.data)

    def _begin_span(self, ts: float, head: http1.Head) -> RequestSpan:
        conn = self.conn
        tracing = conn.tracing
        assert tracing is not None
        span = tracing.begin(ts, head, conn.toxic_views())
        span.request_bytes = len(head.raw)
        conn.spans.append(span)  # in request order, as ``expect`` will be
        self.req_span = span
        return span

    async def _request_head(self, ts: float, head: http1.Head) -> None:
        span = self._begin_span(ts, head) if self.conn.tracing is not None else None
        now = time.monotonic()
        for link in self.conn.chain(self.stream):
            toxic = link.toxic
            attrs = toxic.attrs
            if not link.live:
                continue
            if isinstance(attrs, HttpErrorAttrs) and toxic.take(now):
                self.counters.acted(toxic.type)
                self.dropping = True
                if span is not None:
                    span.injected = True
                    span.status = attrs.status
                self.conn.expect.append(
                    http1.error_response(
                        attrs.status,
                        retry_after=attrs.retry_after,
                        body=attrs.body,
                        content_type=attrs.content_type,
                    )
                )
                self.conn.down._wake()
                return
            if isinstance(attrs, HttpLatencyAttrs) and toxic.take(now):
                self.counters.acted(toxic.type)
                jitter = random.uniform(-attrs.jitter, attrs.jitter) if attrs.jitter else 0.0  # noqa: S311
                deadline = ts + max(0.0, attrs.latency + jitter) / 1000.0
                while link.live and not await self._sleep_until(deadline, precise=True):
                    pass
        self.conn.expect.append(None)
        down_framer = self.conn.down.framer
        if down_framer is not None:
            down_framer.request_methods.append(head.method)
        if head.header("upgrade") or head.method == "CONNECT":
            # What follows a successful upgrade is not HTTP; the response decides.
            pass
        await self._emit(ts, head.raw)

    async def _answer_refused(self) -> None:
        """Write the proxy's own responses that are due before the next upstream one."""
        framer = self.framer
        while self.conn.expect and self.conn.expect[0] is not None:
            if framer is not None and not framer.at_boundary:
                return
            if self.conn.up.dropping and len(self.conn.expect) == 1:
                return  # the refused request's body is still arriving
            response = self.conn.expect.popleft()
            assert response is not None
            self.counters.response(int(response[9:12]))
            await self._write(response)
            if self.conn.spans:
                span = self.conn.spans.popleft()
                span.response_bytes = len(response)
                self.conn.end_span(span)

    async def _response_event(self, ts: float, event: http1.Event) -> None:
        if isinstance(event, http1.Head):
            if self.conn.spans:
                self._response_head(event.status)
            if event.status >= 200:
                self.counters.response(event.status)
                if self.conn.expect and self.conn.expect[0] is None:
                    self.conn.expect.popleft()
                if event.status == 101 and self.conn.up.framer is not None:
                    self.conn.up.framer.fail()
                self.sse = self._sse_for(event)
            await self._emit(ts, event.raw)
        elif isinstance(event, http1.Body):
            if self.sse is not None:
                await self._sse_body(ts, event)
            else:
                await self._emit(ts, http1.encode(event))
        elif isinstance(event, http1.End):
            await self._response_end(ts, event)
        else:
            await self._emit(ts, event.data)

    async def _response_end(self, ts: float, event: http1.End) -> None:
        if self.sse is not None:
            rest = bytes(self.sse.buf)
            self.sse = None
            if rest:
                await self._emit(ts, http1.encode(http1.Body(rest, event.chunked)))
        await self._emit(ts, http1.encode(event))
        if self.emit_span is not None and self.final:
            self._response_ended()

    def _response_head(self, status: int) -> None:
        """Tracing: the response to the oldest traced request begins (or an interim one)."""
        span = self.conn.spans[0]
        self.emit_span = span
        if status >= 200 or status == 101:  # 101: what follows is not HTTP
            span.status = status
            self.final = True

    def _response_ended(self) -> None:
        span = self.conn.spans.popleft()
        self.emit_span = None
        self.final = False
        if self.out:
            self.ending.append(span)  # its last bytes leave with this read's write
        else:
            self.conn.end_span(span)

    def _sse_for(self, head: http1.Head) -> _SseState | None:
        if not head.is_sse or head.status != 200:
            return None
        now = time.monotonic()
        links = [
            lk
            for lk in self.conn.chain(self.stream)
            if lk.toxic.is_sse and lk.live and lk.toxic.take(now)
        ]
        return _SseState(links) if links else None

    async def _sse_body(self, ts: float, event: http1.Body) -> None:
        sse = self.sse
        assert sse is not None
        # Events no toxic holds back leave together, in one write: a write per event
        # capped a stream near 2 500 events/s. The body is split in bounded slices
        # because split_events rescans what is left of its buffer for every event.
        batch = bytearray()
        data = memoryview(event.data)
        for off in range(0, len(data), _SSE_SLICE):
            sse.buf += data[off : off + _SSE_SLICE]
            for piece in http1.split_events(sse.buf):
                if batch and self._sse_would_wait(sse):
                    await self._emit(ts, http1.encode(http1.Body(bytes(batch), event.chunked)))
                    batch.clear()
                await self._sse_gate(sse)
                sse.sent += 1
                sse.last = time.monotonic()
                batch += piece
        if batch:
            await self._emit(ts, http1.encode(http1.Body(bytes(batch), event.chunked)))

    def _sse_would_wait(self, sse: _SseState) -> bool:
        """Would ``_sse_gate`` hold the next event back (or cut the stream) now?"""
        now = time.monotonic()
        for link in sse.links:
            attrs = link.toxic.attrs
            if not link.live:
                continue
            if isinstance(attrs, StreamCutAttrs) and sse.sent >= attrs.after_events:
                return True
            if (
                isinstance(attrs, StreamStallAttrs)
                and sse.sent == attrs.after_events
                and id(link) not in sse.stalled
            ):
                return True
            if (
                isinstance(attrs, StreamDripAttrs)
                and sse.sent > 0
                and sse.last + attrs.interval / 1000.0 > now
            ):
                return True
        return False

    async def _sse_gate(self, sse: _SseState) -> None:
        """Before event number ``sse.sent + 1``: cut, stall or drip as the toxics say."""
        for link in sse.links:
            attrs = link.toxic.attrs
            if not link.live:
                continue
            if isinstance(attrs, StreamCutAttrs) and sse.sent >= attrs.after_events:
                self.counters.acted(link.toxic.type)
                await self._flush_out()  # the events before the cut arrive
                if attrs.mode == "close":
                    self._finish_now(why=link.toxic.type)
                else:
                    self.conn.close(reset=True, why=link.toxic.type)
                raise ConnectionGone
            if isinstance(attrs, StreamStallAttrs) and sse.sent == attrs.after_events:
                if id(link) in sse.stalled:
                    continue
                sse.stalled.add(id(link))
                self.counters.acted(link.toxic.type)
                deadline = time.monotonic() + (attrs.stall / 1000.0 if attrs.stall else 1e9)
                while link.live and not await self._sleep_until(deadline):
                    pass
            if isinstance(attrs, StreamDripAttrs) and sse.sent > 0:
                deadline = sse.last + attrs.interval / 1000.0
                while link.live and not await self._sleep_until(deadline):
                    pass

    def _finish_now(self, *, why: str) -> None:
        """A clean cut: FIN to the client, close the upstream side."""
        with contextlib.suppress(OSError):
            self.dst.shutdown(socket.SHUT_WR)
        self.conn.close(why=why)

    # ---- the TCP toxic chain -----------------------------------------------------------
    async def _emit(self, ts: float, data: bytes) -> None:
        if not data:
            return
        if self.emit_span is not None:
            self.emit_span.response_bytes += len(data)
        chain = [lk for lk in self.conn.chain(self.stream) if lk.toxic.is_tcp]
        if not chain and self.coalesce:
            self.out += data
            return
        await self._flush_out()
        await self._through(chain, 0, ts, data)

    async def _through(self, chain: list[Link], i: int, ts: float, data: bytes) -> None:
        while i < len(chain) and not chain[i].live:
            i += 1
        if i == len(chain):
            await self._write(data)
            return
        link = chain[i]
        attrs = link.toxic.attrs
        if isinstance(attrs, LatencyAttrs):
            jitter = random.uniform(-attrs.jitter, attrs.jitter) if attrs.jitter else 0.0  # noqa: S311
            deadline = ts + max(0.0, attrs.latency + jitter) / 1000.0
            while link.live and not await self._sleep_until(deadline, precise=True):
                pass
        elif isinstance(attrs, BandwidthAttrs) and attrs.rate > 0:
            await self._bandwidth(chain, i, ts, data, link=link, attrs=attrs)
            return
        elif isinstance(attrs, SlicerAttrs) and attrs.average_size > 0:
            await self._slicer(chain, i, ts, data, link=link, attrs=attrs)
            return
        elif isinstance(attrs, LimitDataAttrs):
            await self._limit_data(chain, i, ts, data, link=link, attrs=attrs)
            return
        elif isinstance(attrs, TimeoutAttrs):
            await self._hold(link, attrs)
        elif isinstance(attrs, ResetPeerAttrs):
            await self._reset_after(link)
        await self._through(chain, i + 1, ts, data)

    async def _bandwidth(
        self,
        chain: list[Link],
        i: int,
        ts: float,
        data: bytes,
        *,
        link: Link,
        attrs: BandwidthAttrs,
    ) -> None:
        step = attrs.rate * 100  # 100 ms worth of bytes, as Toxiproxy sends them
        view = memoryview(data)
        while view:
            piece = bytes(view[:step])
            view = view[step:]
            if link.live:
                deadline = time.monotonic() + len(piece) / (attrs.rate * 1000.0)
                while link.live and not await self._sleep_until(deadline):
                    pass
            await self._through(chain, i + 1, ts, piece)

    async def _slicer(
        self, chain: list[Link], i: int, ts: float, data: bytes, *, link: Link, attrs: SlicerAttrs
    ) -> None:
        """Toxiproxy's slicer: the chunk halved into pieces, ``delay`` µs after each one."""
        view = memoryview(data)
        for size in slice_sizes(len(data), attrs.average_size, attrs.size_variation):
            if not link.live:
                break
            piece = bytes(view[:size])
            view = view[size:]
            await self._through(chain, i + 1, ts, piece)
            if attrs.delay:
                await self._sleep_until(time.monotonic() + attrs.delay / 1e6)
        if view:  # removed mid-chunk: the rest goes on whole, as Toxiproxy's does
            await self._through(chain, i + 1, ts, bytes(view))

    async def _limit_data(
        self,
        chain: list[Link],
        i: int,
        ts: float,
        data: bytes,
        *,
        link: Link,
        attrs: LimitDataAttrs,
    ) -> None:
        room = attrs.bytes - link.passed
        if room > 0:
            piece = data[:room]
            link.passed += len(piece)
            await self._through(chain, i + 1, ts, piece)
        if link.passed >= attrs.bytes:
            self.counters.acted(link.toxic.type)
            # Unread input would turn the close into a reset that drops the bytes
            # still queued to the peer (the last ones allowed): drop the input first.
            for sock in (self.conn.client, self.conn.upstream):
                _discard_input(sock)
            self.conn.close(why=link.toxic.type)
            raise ConnectionGone

    async def _reset_after(self, link: Link) -> None:
        """reset_peer, as Toxiproxy does it: data reaching the toxic starts its clock,
        is held, and the connection is reset (RST) ``timeout`` ms later (0: at once).

        An idle connection is never reset. Removed before it fires, the held data
        passes on (Toxiproxy drops it).
        """
        start = time.monotonic()
        while link.live:
            attrs = link.toxic.attrs
            assert isinstance(attrs, ResetPeerAttrs)
            deadline = start + attrs.timeout / 1000.0
            if time.monotonic() >= deadline:
                self._timer_fired(link)
            await self._sleep_until(deadline)

    async def _hold(self, link: Link, attrs: TimeoutAttrs) -> None:
        """timeout: nothing passes; close after ``timeout`` ms (0 = hold until removed)."""
        while link.live:
            if attrs.timeout > 0:
                deadline = link.attached + attrs.timeout / 1000.0
                if time.monotonic() >= deadline:
                    self._timer_fired(link)
                await self._sleep_until(deadline)
            else:
                await self._sleep_until(time.monotonic() + 3600.0)
            new_attrs = link.toxic.attrs
            assert isinstance(new_attrs, TimeoutAttrs)
            attrs = new_attrs

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.conn.closed:
                raise ConnectionGone
            try:
                n = self.dst.send(view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.EBADF):
                    self.conn.close()
                    raise ConnectionGone from exc
                raise
            self.counters.sent[self.idx] += n
            view = view[n:]
            if view:
                await self._writable()

    async def _writable(self) -> None:
        fut: asyncio.Future[None] = self.loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.dst_fd, ready)
        self.writing = True
        try:
            await fut
        finally:
            self._write_off()


class _SseState:
    __slots__ = ("buf", "last", "links", "sent", "stalled")

    def __init__(self, links: list[Link]) -> None:
        self.links = links
        self.buf = bytearray()
        self.sent = 0
        self.last = time.monotonic()
        self.stalled: set[int] = set()
