"""SSE toxics on a fast stream: events written in large blocks by the server.

The proxy writes the events no toxic holds back together; these tests pin that
the toxics still count and cut at the exact event, and that nothing is lost.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient

EVENT = b"data: %05d\n\n"


class BlockSseServer:
    """Answers ``GET /N`` with N numbered events in 64 KiB writes, then closes."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            n = int(head.split(b" ", 2)[1].strip(b"/"))
            body = b"".join(EVENT % i for i in range(n))
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            )
            for off in range(0, len(body), 65536):
                conn.sendall(body[off : off + 65536])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        self._thread.join(5)


@pytest.fixture
def sse_edge(inproc: ProxyServer) -> Iterator[tuple[ToxiproxyClient, int]]:
    upstream = BlockSseServer()
    try:
        with ToxiproxyClient(inproc.api_url) as api:
            yield api, api.create_proxy("sse", upstream=upstream.addr).port
    finally:
        upstream.close()


def _events(port: int, n: int) -> tuple[list[bytes], float]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.perf_counter()
        s.sendall(b"GET /%d HTTP/1.1\r\nHost: t\r\n\r\n" % n)
        raw = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(1 << 20):
                raw += chunk
        took = time.perf_counter() - t0
    body = raw.split(b"\r\n\r\n", 1)[1]
    return [e + b"\n\n" for e in body.split(b"\n\n") if e], took


def test_stream_drip_without_interval_passes_every_event_in_order(
    sse_edge: tuple[ToxiproxyClient, int],
) -> None:
    api, port = sse_edge
    api.add_toxic("sse", type="stream_drip", attributes={"interval": 0})
    events, took = _events(port, 20_000)
    assert events == [EVENT % i for i in range(20_000)]
    assert took < 5.0, took  # a write per event took ~8 s here


def test_stream_cut_still_cuts_at_the_exact_event(
    sse_edge: tuple[ToxiproxyClient, int],
) -> None:
    api, port = sse_edge
    api.add_toxic("sse", type="stream_cut", attributes={"after_events": 1234, "mode": "close"})
    events, _ = _events(port, 5000)
    assert events == [EVENT % i for i in range(1234)]


def test_stream_drip_with_an_interval_still_spaces_events(
    sse_edge: tuple[ToxiproxyClient, int],
) -> None:
    api, port = sse_edge
    api.add_toxic("sse", type="stream_drip", attributes={"interval": 20})
    events, took = _events(port, 6)
    assert events == [EVENT % i for i in range(6)]
    assert took >= 5 * 0.020, took  # five gaps: none merged into one write
