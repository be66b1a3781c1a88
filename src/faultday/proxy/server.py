"""Proxies, and the server that holds them and answers Toxiproxy's API.

``ProxyServer`` runs one asyncio loop — in a background thread (``start()``/
``stop()``, for the engine and tests) or in the calling thread (``run()``, for
``faultday proxy serve`` and ``python -m faultday.proxy``). Every proxy and the
API live on that loop; counters are read from any thread as frozen snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import ipaddress
import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import JsonValue

from faultday.errors import FaultdayError
from faultday.proxy.counters import LiveCounters, ProxyCounters
from faultday.proxy.eventloop import SpinBudget, new_event_loop
from faultday.proxy.models import ProxySpec, split_hostport
from faultday.proxy.native import KIND_HTTP, Counters, NativeRelay, Released, discard
from faultday.proxy.relay import Connection, PipePool
from faultday.proxy.toxics import Toxic
from faultday.proxy.tracing import EDGE_DISABLED, PROXY_STOPPED, ProxyTracing

log = logging.getLogger(__name__)

T = TypeVar("T")
CONNECT_TIMEOUT = 10.0
_ACCEPT_BATCH = 64


class ProxyError(FaultdayError):
    """A proxy could not be created, started or changed."""


def _connected_now(sock: socket.socket) -> bool:
    # On loopback the handshake completes inside connect(); checking now saves a
    # whole event-loop round trip per connection.
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


def _go_text(exc: OSError) -> str:
    """An OS error as Go's ``syscall.Errno`` spells it: ``address already in use``."""
    if isinstance(exc, socket.gaierror):
        return "no such host" if exc.errno == socket.EAI_NONAME else str(exc.strerror).lower()
    text = str(exc) if exc.errno is None else os.strerror(exc.errno)
    return text[:1].lower() + text[1:]


def bind_listener(listen: str) -> socket.socket:
    """A non-blocking socket listening on ``host:port``; ProxyError when it cannot.

    The error's text is Go's ``net.Listen`` error, as Toxiproxy answers it
    (``listen tcp 127.0.0.1:3310: bind: address already in use``), with the
    address resolved as Go resolves it (``localhost`` is ``127.0.0.1``).
    """
    try:
        host, port = split_hostport(listen)
    except ValueError as exc:
        raise ProxyError(str(exc)) from exc
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        addr = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
    except OSError as exc:
        raise ProxyError(f"listen tcp: lookup {host}: {_go_text(exc)}") from exc
    shown = f"[{addr[0]}]:{port}" if family == socket.AF_INET6 else f"{addr[0]}:{port}"
    sock = socket.socket(family, socket.SOCK_STREAM)
    call = "bind"
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        call = "listen"
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise ProxyError(f"listen tcp {shown}: {call}: {_go_text(exc)}") from exc
    sock.setblocking(False)
    return sock


def listen_address(sock: socket.socket) -> str:
    """The ``host:port`` a listening socket is bound to (``[v6]:port`` for IPv6)."""
    bound = sock.getsockname()
    host = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    return f"{host}:{bound[1]}"


class Proxy:
    """One listening address forwarding to one upstream, with its toxics."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        spec: ProxySpec,
        relay: NativeRelay | None = None,
        native_id: int = 0,
        *,
        tracing: ProxyTracing | None = None,
    ) -> None:
        self.loop = loop
        self.tracing = tracing  # None: no span, no per-request work for one
        self.relay = relay
        self.native_id = native_id  # this proxy's owner id in the native relay
        self.name = spec.name
        self.upstream = spec.upstream
        self.listen = spec.listen
        self.span_name = f"proxy {spec.name}"
        self.enabled = False
        self.toxics: list[Toxic] = []
        self.counters = LiveCounters()
        if relay is not None:
            self.counters.native = Counters()
        self.connections: set[Connection] = set()
        # Connections the native relay holds with toxics on them, by their id there
        # (also in ``connections``): Python keeps their per-connection toxicity draws.
        self.native_conns: dict[int, Connection] = {}
        self._conn_ids = 0
        self.pipes = PipePool()
        self.spin = SpinBudget()
        self.changed: asyncio.Future[None] = loop.create_future()
        self._lsock: socket.socket | None = None
        self._addr: tuple[int, tuple[str, int]] | None = None

    # ---- listening -------------------------------------------------------------------
    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen on ``self.listen``, or on ``sock`` (bound by ``bind_listener`` beforehand)."""
        if self.enabled:
            return
        if sock is None:
            sock = bind_listener(self.listen)
        self.listen = listen_address(sock)
        self._lsock = sock
        self.enabled = True
        self.loop.add_reader(sock.fileno(), self._accept)
        log.info("proxy %s listening on %s -> %s", self.name, self.listen, self.upstream)

    def take_listener(self) -> socket.socket | None:
        """Stop accepting and hand the listening socket over, still bound (to a replacement)."""
        sock, self._lsock = self._lsock, None
        if sock is not None:
            self.loop.remove_reader(sock.fileno())
        return sock

    def stop(self, *, why: str = EDGE_DISABLED) -> None:
        """Stop listening and close every open connection (``enabled: false``).

        ``why``: what the spans of requests still in flight end with (``error.type``).
        """
        if self._lsock is not None:
            self.loop.remove_reader(self._lsock.fileno())
            self._lsock.close()
            self._lsock = None
        self.enabled = False
        for released in self._take_back_native():
            self.drop_released(released)
        for conn_id in list(self.native_conns):
            self.native_closed(conn_id)
        for conn in list(self.connections):
            conn.close(why=why)
        self.pipes.close()

    def set_upstream(self, upstream: str) -> None:
        self.upstream = upstream
        self._addr = None

    # ---- connections -------------------------------------------------------------------
    def _accept(self) -> None:
        lsock = self._lsock
        if lsock is None:
            return
        for _ in range(_ACCEPT_BATCH):
            try:
                client, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("proxy %s: accept failed: %s", self.name, exc)
                return
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.counters.connections_total += 1
            self.counters.connections_active += 1
            if self._addr is None:
                self.loop.create_task(self._resolve_then_connect(client))
            else:
                self._connect(client, self._addr)

    async def _resolve_then_connect(self, client: socket.socket) -> None:
        try:
            self._addr = await self._resolve()
        except (OSError, ValueError) as exc:
            log.warning("proxy %s: cannot resolve upstream %s: %s", self.name, self.upstream, exc)
            self._drop(client)
            return
        self._connect(client, self._addr)

    async def _resolve(self) -> tuple[int, tuple[str, int]]:
        host, port = split_hostport(self.upstream)
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(host)
            return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (host, port))
        infos = await asyncio.wait_for(
            self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), CONNECT_TIMEOUT
        )
        family, _, _, _, addr = infos[0]
        return (family, (str(addr[0]), int(addr[1])))

    def _connect(self, client: socket.socket, addr: tuple[int, tuple[str, int]]) -> None:
        up = socket.socket(addr[0], socket.SOCK_STREAM)
        up.setblocking(False)
        with contextlib.suppress(OSError):
            up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = up.connect_ex(addr[1])
        if err == 0 or (err == errno.EINPROGRESS and _connected_now(up)):
            self._connected(client, up)
        elif err == errno.EINPROGRESS:
            timer = self.loop.call_later(
                CONNECT_TIMEOUT, self._connect_failed, client, up, "timeout"
            )
            self.loop.add_writer(up.fileno(), self._connect_done, client, up, timer)
        else:
            self._connect_failed(client, up, errno.errorcode.get(err, str(err)))

    def _connect_done(
        self, client: socket.socket, up: socket.socket, timer: asyncio.TimerHandle
    ) -> None:
        timer.cancel()
        self.loop.remove_writer(up.fileno())
        err = up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._connect_failed(client, up, errno.errorcode.get(err, str(err)))
        else:
            self._connected(client, up)

    def _connect_failed(self, client: socket.socket, up: socket.socket, why: str) -> None:
        if up.fileno() >= 0:
            self.loop.remove_writer(up.fileno())
        up.close()
        self._addr = None  # resolve again next time: the upstream may have moved
        self.counters.upstream_failures += 1
        log.info("proxy %s: upstream %s unreachable (%s)", self.name, self.upstream, why)
        self._drop(client)

    def _drop(self, client: socket.socket) -> None:
        client.close()
        self.counters.connections_active -= 1

    def _connected(self, client: socket.socket, up: socket.socket) -> None:
        if not self.enabled:
            client.close()
            up.close()
            self.counters.connections_active -= 1
            return
        native, relay = self.counters.native, self.relay
        if (
            relay is not None
            and native is not None
            and not self.toxics
            and relay.adopt(self.native_id, client, up, native)
        ):
            return
        conn = Connection(self, client, up)
        self.connections.add(conn)
        conn.start()

    # ---- the native relay ---------------------------------------------------------------
    def _take_back_native(self) -> list[Released]:
        return self.relay.take(self.native_id) if self.relay is not None else []

    def adopt_native(self, released: Released) -> None:
        conn = self.native_conns.pop(released.id, None) if released.id else None
        if conn is None:
            conn = Connection(self, released.client, released.upstream)
            self.connections.add(conn)
        else:
            conn.rebind(released)
        conn.resume(released, http=released.kind == KIND_HTTP)

    def drop_released(self, released: Released) -> None:
        """Close a connection the relay handed back that nobody will carry on."""
        conn = self.native_conns.pop(released.id, None) if released.id else None
        if conn is not None:
            self.connections.discard(conn)
        discard(released)
        self.counters.connections_active -= 1

    def next_conn_id(self) -> int:
        self._conn_ids += 1
        return self._conn_ids

    def went_native(self, conn: Connection, conn_id: int) -> None:
        """``conn`` is the native relay's now; tracked (``conn_id``) while toxics act."""
        if conn_id:
            self.native_conns[conn_id] = conn
        else:
            self.connections.discard(conn)  # the relay counts its close

    def native_closed(self, conn_id: int, closed_by: str | None = None) -> None:
        """The relay closed (and counted) a tracked connection: forget it.

        ``closed_by``: the toxic type that closed it (limit_data, timeout), counted as acting.
        """
        if closed_by is not None:
            self.counters.acted(closed_by)
        conn = self.native_conns.pop(conn_id, None)
        if conn is not None:
            self.connections.discard(conn)

    def _retake_native(self) -> None:
        taken = self._take_back_native()
        returned = {r.id for r in taken}
        for conn_id in [i for i in self.native_conns if i not in returned]:
            self.native_closed(conn_id)  # its close note is still on its way
        for released in taken:
            self.adopt_native(released)

    def connection_closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.counters.connections_active -= 1

    # ---- toxics ------------------------------------------------------------------------
    def toxic(self, name: str) -> Toxic | None:
        return next((t for t in self.toxics if t.name == name), None)

    def add_toxic(self, toxic: Toxic) -> None:
        self.toxics.append(toxic)
        self.notify()

    def remove_toxic(self, toxic: Toxic) -> None:
        toxic.active = False
        self.toxics.remove(toxic)
        self.notify()

    def clear_toxics(self) -> None:
        for toxic in self.toxics:
            toxic.active = False
        self.toxics.clear()
        self.notify()

    def notify(self) -> None:
        """Wake every sleeping toxic and move connections between fast and toxic paths."""
        old, self.changed = self.changed, self.loop.create_future()
        old.set_result(None)
        for conn in list(self.connections):
            conn.toxics_changed()
        if self.native_conns or (self.toxics and self.counters.open()):
            # Each connection is handed over again with the new toxics, or kept in Python.
            self._retake_native()

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.toxics],
        }


def freeze_startup() -> None:
    """Keep what start-up built (modules, models, the loop) out of the collector's walks.

    It lives as long as the process. Left in the oldest generation, every full
    collection walked all of it: one took ~20 ms of CPU in the proxy process, a
    stall that lands on whatever API call or relayed chunk is waiting. Only for
    a process that is the proxy (``run``): in an engine's process it would pin
    the engine's garbage too.
    """
    gc.collect()
    gc.freeze()


class ProxyServer:
    """The Toxiproxy-API server and its proxies, on one event loop."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        proxies: tuple[ProxySpec, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
        tracing: ProxyTracing | None = None,
    ) -> None:
        self.host = host
        self.tracing = tracing  # spans per relayed HTTP request; flushed when serve() ends
        self.port = port
        self.allowed_hosts = allowed_hosts  # API Host names beyond loopback (webguard)
        self._initial = proxies
        self.proxies: dict[str, Proxy] = {}
        self.relay: NativeRelay | None = None
        self._native_ids = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise ProxyError("proxy server is not running")
        return self._loop

    @property
    def api_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # ---- running -----------------------------------------------------------------------
    async def serve(self, on_ready: Callable[[ProxyServer], None] | None = None) -> None:
        """Serve until ``shutdown()``; the API is bound when ``on_ready`` is called."""
        # The API module imports this one (ProxyServer); imported when serving starts.
        from faultday.proxy.api import ApiHandler  # noqa: PLC0415

        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        handler = ApiHandler(self, allowed_hosts=self.allowed_hosts)
        server = await self._loop.create_server(handler.connection, self.host, self.port)
        self.port = int(server.sockets[0].getsockname()[1])
        self.relay = NativeRelay.start(self._loop, self._handoff, self._native_closed)
        if self.tracing is not None:
            self.tracing.start(self._loop)
        log.info("faultday proxy API listening on %s", self.api_url)
        try:
            for spec in self._initial:
                try:
                    await handler.create(spec)
                except ProxyError as exc:  # the API's text names no proxy; a config file has many
                    raise ProxyError(f"proxy {spec.name}: {exc}") from exc
            if on_ready is not None:
                on_ready(self)
            await self._stopping.wait()
        finally:
            server.close()
            for proxy in list(self.proxies.values()):
                proxy.stop(why=PROXY_STOPPED)
            self.proxies.clear()
            await handler.close()
            for proxy in self.proxies.values():
                proxy.pipes.close()
            if self.relay is not None:
                self.relay.close()
                self.relay = None
            if self.tracing is not None:
                self.tracing.shutdown()  # after the proxies: their last spans ended as they closed
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    def native_id(self) -> int:
        """A fresh owner id for a new proxy's connections in the native relay."""
        self._native_ids += 1
        return self._native_ids

    def _handoff(self, released: Released) -> None:
        # The relay saw HTTP on a connection: Python frames and counts it from now on.
        proxy = next((p for p in self.proxies.values() if p.native_id == released.owner), None)
        if proxy is None:
            discard(released)
        elif not proxy.enabled:
            proxy.drop_released(released)
        else:
            proxy.adopt_native(released)

    def _native_closed(self, owner: int, conn_id: int, closed_by: str | None) -> None:
        proxy = next((p for p in self.proxies.values() if p.native_id == owner), None)
        if proxy is not None:
            proxy.native_closed(conn_id, closed_by)

    def shutdown(self) -> None:
        """Ask ``serve()`` to return; callable from any thread."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)

    def run(self, on_ready: Callable[[ProxyServer], None] | None = None) -> None:
        """Serve in the calling thread until SIGINT/SIGTERM (the process is the proxy's)."""
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.shutdown)

        def ready(server: ProxyServer) -> None:
            freeze_startup()
            if on_ready is not None:
                on_ready(server)

        try:
            loop.run_until_complete(self.serve(ready))
        finally:
            loop.close()

    def start(self, *, timeout: float = 10.0) -> ProxyServer:
        """Serve in a background thread; return once the API answers."""
        if self._thread is not None:
            raise ProxyError("proxy server already started")
        self._thread = threading.Thread(
            target=self._thread_main, name="faultday-proxy", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise ProxyError(f"proxy server did not start within {timeout:g}s")
        if self._error is not None:
            raise ProxyError(f"proxy server failed to start: {self._error}") from self._error
        return self

    def _thread_main(self) -> None:
        loop = new_event_loop()
        try:
            loop.run_until_complete(self.serve(lambda _s: self._ready.set()))
        except BaseException as exc:  # reported to start()'s caller, not swallowed
            self._error = exc
            log.exception("proxy server stopped with an error")
        finally:
            self._ready.set()
            loop.close()

    def stop(self, *, timeout: float = 10.0) -> None:
        self.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise ProxyError(f"proxy server did not stop within {timeout:g}s")
            self._thread = None

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- in-process access (any thread) ---------------------------------------------------
    def counters(self, name: str) -> ProxyCounters:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ProxyError(f"no proxy named {name!r}")
        return proxy.counters.snapshot(name)

    def all_counters(self) -> dict[str, ProxyCounters]:
        return {name: p.counters.snapshot(name) for name, p in list(self.proxies.items())}

    def call(self, fn: Callable[[], Awaitable[T]], *, timeout: float = 10.0) -> T:
        """Run ``fn()`` on the proxy loop from another thread and wait for its result."""

        async def runner() -> T:
            return await fn()

        fut = asyncio.run_coroutine_threadsafe(runner(), self.loop)
        return fut.result(timeout)
