"""The no-toxic fast path, native (relay.c) and Python, on real sockets.

Every test runs twice: with the native relay (the default when it is built)
and with ``FAULTDAY_PROXY_NATIVE=0`` (the Python splice path), so the two
paths must behave the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import threading
import time

import pytest
from tests.proxy.conftest import EchoServer, open_fds, until

from faultday.proxy import ProxyServer, native
from faultday.proxy.client import ToxiproxyClient

MIB = 1 << 20
SMALL_BUF = 64 << 10  # bytes: fixed socket buffers where a test needs bytes to back up


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def test_native_relay_is_built_where_a_compiler_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pip install -e .` / `make setup` compile relay.c; a silent fallback would hide it."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the proxy relays in Python here")
    monkeypatch.setenv(native.ENV_SWITCH, "1")  # a run with the Python path forced too
    assert native.LIBRARY.exists(), f"{native.LIBRARY} missing: run `make native`"
    assert native.available()


def test_bytes_arrive_intact_and_are_counted(
    server: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    port = api.create_proxy("e", upstream=echo.addr).port
    payload = os.urandom(8 * MIB)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(_recv_exactly(s, len(payload))))
        reader.start()
        s.sendall(payload)
        reader.join(20)
        assert got and hashlib.sha256(got[0]).digest() == hashlib.sha256(payload).digest()
    assert until(lambda: server.counters("e").connections_active == 0)
    c = server.counters("e")
    assert c.connections_total == 1
    assert c.bytes_received_upstream == c.bytes_sent_upstream == len(payload)
    assert c.bytes_received_downstream == c.bytes_sent_downstream == len(payload)


def test_half_close_passes_through(server: ProxyServer, api: ToxiproxyClient) -> None:
    """Client EOF reaches the server; the server's answer after it still reaches the client."""
    lsock = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def upstream() -> None:
        conn, _ = lsock.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            seen.append(data)
            conn.sendall(b"after-eof:" + data)

    t = threading.Thread(target=upstream, daemon=True)
    t.start()
    port = api.create_proxy("hc", upstream=f"127.0.0.1:{lsock.getsockname()[1]}").port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"ping")
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    t.join(5)
    lsock.close()
    assert seen == [b"ping"]
    assert answer == b"after-eof:ping"
    assert until(lambda: server.counters("hc").connections_active == 0)


def test_server_speaks_first(server: ProxyServer, api: ToxiproxyClient) -> None:
    lsock = socket.create_server(("127.0.0.1", 0))

    def upstream() -> None:
        conn, _ = lsock.accept()
        with conn:
            conn.sendall(b"220 hello\r\n")
            conn.recv(100)

    t = threading.Thread(target=upstream, daemon=True)
    t.start()
    port = api.create_proxy("banner", upstream=f"127.0.0.1:{lsock.getsockname()[1]}").port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert s.recv(100) == b"220 hello\r\n"
        s.sendall(b"QUIT\r\n")
    t.join(5)
    lsock.close()


def test_toxic_added_mid_connection_acts_then_goes(
    server: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    port = api.create_proxy("t", upstream=echo.addr).port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def rtt() -> float:
            t0 = time.perf_counter()
            s.sendall(b"x" * 1024)
            _recv_exactly(s, 1024)
            return time.perf_counter() - t0

        assert rtt() < 0.1
        api.add_toxic("t", type="latency", name="slow", attributes={"latency": 150})
        assert rtt() >= 0.149
        api.delete_toxic("t", "slow")
        assert min(rtt() for _ in range(5)) < 0.05


def test_bytes_in_flight_survive_the_takeover(server: ProxyServer, api: ToxiproxyClient) -> None:
    """A toxic added while bytes sit in the relay's pipe: they arrive, in order, through it.

    The two outer sockets get small fixed buffers: autotuned loopback buffers (up to
    4 MiB to send, 6 MiB to receive, each) could otherwise take in nearly the whole
    payload, and whether anything backed up in the relay depended on the machine's load.
    """
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUF)  # accepted sockets inherit it
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    start_reading = threading.Event()
    received: list[bytes] = []
    size = 64 * MIB  # beyond every buffer on the way (relay inbox 4 MiB, its sockets autotuned)

    def upstream() -> None:
        conn, _ = lsock.accept()
        with conn:
            start_reading.wait(10)
            received.append(_recv_exactly(conn, size))

    t = threading.Thread(target=upstream, daemon=True)
    t.start()
    port = api.create_proxy("fill", upstream=f"127.0.0.1:{lsock.getsockname()[1]}").port
    payload = os.urandom(size)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUF)
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        sent = 0
        stalled_at = time.monotonic() + 1.0
        while sent < size and time.monotonic() < stalled_at:  # until every buffer is full
            try:
                sent += s.send(payload[sent : sent + MIB])
                stalled_at = time.monotonic() + 0.3
            except BlockingIOError:
                time.sleep(0.01)
        assert sent < size, "nothing backed up: the upstream read too early"
        api.add_toxic("fill", type="bandwidth", stream="upstream", attributes={"rate": 1 << 20})
        start_reading.set()
        s.setblocking(True)
        s.sendall(payload[sent:])
        t.join(30)
    lsock.close()
    assert received and hashlib.sha256(received[0]).digest() == hashlib.sha256(payload).digest()


def test_http_is_framed_and_counted(server: ProxyServer, api: ToxiproxyClient) -> None:
    lsock = socket.create_server(("127.0.0.1", 0))

    def upstream() -> None:
        conn, _ = lsock.accept()
        with conn:
            for _ in range(2):
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    t = threading.Thread(target=upstream, daemon=True)
    t.start()
    port = api.create_proxy("h", upstream=f"127.0.0.1:{lsock.getsockname()[1]}").port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for _ in range(2):
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _recv_exactly(s, 40).endswith(b"ok")
    t.join(5)
    lsock.close()
    assert until(lambda: server.counters("h").http_requests == 2)
    assert server.counters("h").responses(200) == 2


def test_disabling_closes_open_connections(
    server: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    port = api.create_proxy("d", upstream=echo.addr).port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"abc")
        assert _recv_exactly(s, 3) == b"abc"
        api.set_enabled("d", False)
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(10) == b""
    assert server.counters("d").connections_active == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_many_connections_leave_no_descriptor_behind(
    monkeypatch: pytest.MonkeyPatch, echo: EchoServer
) -> None:
    """Sockets, pipes and the relay's own descriptors all go with the server."""
    if not native.available():
        pytest.skip("the native relay is not built here (no C compiler)")
    monkeypatch.setenv(native.ENV_SWITCH, "1")
    before = open_fds()
    srv = ProxyServer().start()
    try:
        with ToxiproxyClient(srv.api_url) as api:
            port = api.create_proxy("m", upstream=echo.addr).port
            socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(150)]
            for i, s in enumerate(socks):
                s.sendall(b"%d" % i)
            for i, s in enumerate(socks):
                assert s.recv(10) == b"%d" % i
            for s in socks[:75]:
                s.close()
            assert until(lambda: srv.counters("m").connections_active == 75)
            api.add_toxic("m", type="latency", attributes={"latency": 1})  # takes the rest back
            for s in socks[75:]:
                s.close()
            assert until(lambda: srv.counters("m").connections_active == 0)
    finally:
        srv.stop()
    assert until(lambda: open_fds() <= before), (before, open_fds())
