"""slicer, limit_data and timeout, on real sockets, in the native relay and in Python.

Every test runs with the native relay and with ``FAULTDAY_PROXY_NATIVE=0`` (the
Python toxic path); the behaviour asserted is Toxiproxy 2.12's (toxics/slicer.go,
limit_data.go, timeout.go), except where a test says faultday differs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time

import pytest
from tests.proxy.conftest import connect, until

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient
from faultday.proxy.toxics import NATIVE_TYPES, slice_sizes


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, f"closed after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def _read_to_end(s: socket.socket, limit: float = 5.0) -> bytes:
    """Everything until the proxy closes the connection (FIN, or RST after data)."""
    s.settimeout(limit)
    out = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            out += chunk
    return bytes(out)


class RecordingServer:
    """An upstream that keeps what one connection sent it, until that connection ends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.got = bytearray()
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn, contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                self.got += chunk
        self.ended.set()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


def _held_natively(server: ProxyServer, n: int) -> bool:
    """On the native run: the relay holds ``n`` toxic connections (Python: vacuous).

    Waits a little: the relay moves bytes from the moment it adopts a connection,
    before the proxy's loop has recorded it (the adopt call releases the GIL).
    """
    if server.relay is None:
        return True
    return until(lambda: len(server.proxies["edge"].native_conns) == n, timeout=2.0)


def _acted(server: ProxyServer, toxic_type: str) -> int:
    return dict(server.counters("edge").toxic_actions).get(toxic_type, 0)


def test_these_toxics_run_natively() -> None:
    assert {"slicer", "limit_data", "timeout"} <= NATIVE_TYPES


@pytest.mark.parametrize(
    ("n", "average", "variation"),
    [(1000, 100, 0), (1000, 100, 40), (65_536, 1, 0), (7, 10, 0), (5000, 3, 50)],
)
def test_slicer_cuts_as_toxiproxy_does(n: int, average: int, variation: int) -> None:
    sizes = slice_sizes(n, average, variation)
    assert sum(sizes) == n
    assert min(sizes) >= 1
    assert max(sizes) <= max(average + variation, 1) or sizes == [n]


def test_slicer_halves_without_variation() -> None:
    # SlicerToxic.chunk(0, 1000) with average 100: 1000 -> 500 -> 250 -> 125 -> 62 + 63.
    assert slice_sizes(1000, 100, 0) == [62, 63] * 8


def test_slicer_sends_pieces_with_a_delay_after_each(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic(
        "edge",
        type="slicer",
        attributes={"average_size": 100, "size_variation": 0, "delay": 20_000},
    )
    payload = os.urandom(1000)
    with connect(edge) as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        pieces: list[bytes] = []
        while sum(map(len, pieces)) < len(payload):
            chunk = s.recv(65536)
            assert chunk
            pieces.append(chunk)
        took = time.perf_counter() - t0
        assert _held_natively(server, 1)
    assert b"".join(pieces) == payload
    # 16 pieces of 62/63 bytes, 20 ms apart; a reader late on a busy machine may get two.
    assert len(pieces) >= 10, [len(p) for p in pieces]
    assert statistics.median(map(len, pieces)) <= 100
    assert took >= 15 * 0.020 * 0.9, took


def test_slicer_without_delay_keeps_every_byte(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic(
        "edge",
        type="slicer",
        attributes={"average_size": 1000, "size_variation": 300, "delay": 0},
    )
    payload = os.urandom(2 << 20)
    with connect(edge) as s:
        got = bytearray()
        for off in range(0, len(payload), 1 << 18):
            s.sendall(payload[off : off + (1 << 18)])
            got += _recv_exactly(s, min(1 << 18, len(payload) - off))
        assert _held_natively(server, 1)
    assert bytes(got) == payload


def test_limit_data_closes_once_its_bytes_are_through(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="limit_data", attributes={"bytes": 1000})
    payload = os.urandom(5000)
    with connect(edge) as s:
        s.sendall(payload[:300])
        assert _recv_exactly(s, 300) == payload[:300]
        assert _held_natively(server, 1)
        s.sendall(payload[300:])
        assert _read_to_end(s) == payload[300:1000]
    assert until(lambda: server.counters("edge").connections_active == 0)
    assert until(lambda: _acted(server, "limit_data") == 1)  # the relay's note is on its way
    assert _held_natively(server, 0)


def test_limit_data_counts_across_a_toxic_change(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="limit_data", attributes={"bytes": 1000})
    payload = os.urandom(1200)
    with connect(edge) as s:
        s.sendall(payload[:600])
        assert _recv_exactly(s, 600) == payload[:600]
        # Another toxic: the connection is taken back and handed over again.
        api.add_toxic("edge", type="latency", attributes={"latency": 1})
        assert _held_natively(server, 1)
        s.sendall(payload[600:])
        assert _read_to_end(s) == payload[600:1000]


def test_limit_data_upstream_cuts_what_the_server_gets(
    server: ProxyServer, api: ToxiproxyClient
) -> None:
    upstream = RecordingServer()
    try:
        port = api.create_proxy("edge", upstream=upstream.addr).port
        api.add_toxic("edge", type="limit_data", stream="upstream", attributes={"bytes": 10})
        with connect(port) as s:
            s.sendall(b"0123456789abcdefghij")
            assert _read_to_end(s) == b""
        assert upstream.ended.wait(5)
        assert bytes(upstream.got) == b"0123456789"
    finally:
        upstream.close()


def test_limit_data_zero_closes_at_the_first_data_not_before(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="limit_data", stream="upstream", attributes={"bytes": 0})
    with connect(edge) as s:
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(10)  # idle: still open
        s.sendall(b"x")
        assert _read_to_end(s) == b""


def test_limit_data_with_toxicity_zero_passes_everything(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="limit_data", toxicity=0.0, attributes={"bytes": 10})
    with connect(edge) as s:
        s.sendall(b"z" * 5000)
        assert _recv_exactly(s, 5000) == b"z" * 5000


def test_timeout_closes_an_idle_connection_on_its_clock(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="timeout", attributes={"timeout": 150})
    with connect(edge) as s:
        t0 = time.perf_counter()
        assert _read_to_end(s) == b""  # no data sent: Toxiproxy's timer runs anyway
        took = time.perf_counter() - t0
    assert 0.14 <= took < 1.0, took
    assert until(lambda: _acted(server, "timeout") == 1)
    assert until(lambda: server.counters("edge").connections_active == 0)


def test_timeout_passes_nothing_before_it_closes(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="timeout", attributes={"timeout": 300})
    with connect(edge) as s:
        s.sendall(b"never back")
        assert _held_natively(server, 1)
        assert _read_to_end(s) == b""


def test_timeout_zero_holds_until_removed_then_lets_go(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="timeout", attributes={"timeout": 0})
    with connect(edge) as s:
        s.sendall(b"held")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(10)
        assert _held_natively(server, 1)
        # faultday releases the held bytes (Toxiproxy's docs; its code drops them and
        # closes the connection: tests/proxy/test_proxy_toxics.py shows both).
        api.delete_toxic("edge", "timeout_downstream")
        s.settimeout(2)
        assert _recv_exactly(s, 4) == b"held"
        s.sendall(b"again")
        assert _recv_exactly(s, 5) == b"again"
