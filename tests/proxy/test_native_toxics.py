"""The stream toxics (latency, bandwidth; slicer, limit_data, timeout in
test_native_stream_toxics.py) in the native relay, on real sockets.

Every test runs with the native relay and with ``FAULTDAY_PROXY_NATIVE=0`` (the
Python toxic path): the behaviour must be the same. Where a test says the relay
holds a connection, that is checked on the native run only.
"""

from __future__ import annotations

import os
import socket
import statistics
import time

from tests.proxy.conftest import connect, open_fds, until

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient
from faultday.proxy.toxics import NATIVE_TYPES


def _rtt(s: socket.socket, size: int = 1024) -> float:
    t0 = time.perf_counter()
    s.sendall(b"x" * size)
    got = 0
    while got < size:
        chunk = s.recv(65536)
        assert chunk, "closed during a round trip"
        got += len(chunk)
    return time.perf_counter() - t0


def _held_natively(server: ProxyServer, n: int) -> bool:
    """On the native run: the relay holds ``n`` toxic connections (Python: vacuous)."""
    if server.relay is None:
        return True
    return len(server.proxies["edge"].native_conns) == n


def test_the_native_types_are_toxics_the_api_knows(api: ToxiproxyClient, edge: int) -> None:
    for toxic_type in sorted(NATIVE_TYPES):
        api.add_toxic("edge", type=toxic_type, name=toxic_type)
    assert {t.type for t in api.toxics("edge")} == NATIVE_TYPES


def test_latency_is_never_early_and_runs_natively(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", attributes={"latency": 10})
    with connect(edge) as s:
        got = [_rtt(s) for _ in range(20)]
        assert _held_natively(server, 1)
    assert min(got) >= 0.010, min(got)
    assert statistics.median(got) < 0.025, got


def test_jitter_stays_within_its_bounds(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", attributes={"latency": 20, "jitter": 10})
    with connect(edge) as s:
        got = [_rtt(s, 10) for _ in range(20)]
    assert min(got) >= 0.010, got
    assert statistics.median(got) < 0.040, got  # not the max: a loaded CI machine stalls
    assert max(got) - min(got) > 0.004, got  # it does vary


def test_bandwidth_limits_rate_natively(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="bandwidth", attributes={"rate": 200})  # 200 KB/s
    with connect(edge) as s:
        t0 = time.perf_counter()
        took = _rtt(s, 60_000)
        assert _held_natively(server, 1)
    assert 0.25 <= took < 0.8, (took, time.perf_counter() - t0)


def test_a_pass_through_bandwidth_toxic_costs_nothing_visible(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="bandwidth", attributes={"rate": 100_000_000})  # 100 GB/s
    payload = os.urandom(8 << 20)
    with connect(edge) as s:
        t0 = time.perf_counter()
        s.sendall(payload[: 1 << 20])
        got = bytearray()
        sent = 1 << 20
        while len(got) < len(payload):
            if sent < len(payload):
                s.sendall(payload[sent : sent + (1 << 20)])
                sent += 1 << 20
            got += s.recv(1 << 20)
        took = time.perf_counter() - t0
    assert bytes(got) == payload
    assert took < 2.0, took


def test_latency_and_bandwidth_together(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", name="lat", attributes={"latency": 30})
    api.add_toxic("edge", type="bandwidth", name="bw", attributes={"rate": 200})
    with connect(edge) as s:
        took = _rtt(s, 40_000)  # 0.2 s at 200 KB/s, then (or overlapping) 30 ms
        assert _held_natively(server, 1)
    assert 0.2 <= took < 0.7, took


def test_each_connection_keeps_its_draw_when_toxics_change(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", toxicity=0.5, name="lat", attributes={"latency": 60})
    socks = [connect(edge) for _ in range(16)]
    try:
        before = [_rtt(s, 10) >= 0.058 for s in socks]
        assert 0 < sum(before) < 16  # P(all one way) = 2 * 0.5**16
        # Another toxic: every connection is taken back and handed over again.
        api.add_toxic("edge", type="bandwidth", name="bw", attributes={"rate": 100_000_000})
        assert _held_natively(server, 16)
        after = [_rtt(s, 10) >= 0.058 for s in socks]
        assert after == before
    finally:
        for s in socks:
            s.close()


def test_a_toxic_the_relay_cannot_apply_moves_its_connections_to_python(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", name="lat", attributes={"latency": 20})
    with connect(edge) as s:
        assert _rtt(s) >= 0.020
        assert "slow_close" not in NATIVE_TYPES
        api.add_toxic("edge", type="slow_close", name="cut", attributes={"delay": 10})
        assert _held_natively(server, 0)  # slow_close acts in Python
        assert _rtt(s, 1000) >= 0.020  # and so does the latency toxic now
        api.delete_toxic("edge", "cut")
        assert _rtt(s) >= 0.020  # it finishes in Python; a new connection is the relay's
        with connect(edge) as fresh:
            assert _rtt(fresh) >= 0.020
            assert _held_natively(server, 1)
            api.delete_toxic("edge", "lat")
            assert min(_rtt(fresh) for _ in range(5)) < 0.010
            assert _held_natively(server, 0)  # no toxic: relayed untracked
        assert min(_rtt(s) for _ in range(5)) < 0.010


def test_half_close_waits_for_the_delayed_bytes(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", stream="upstream", attributes={"latency": 50})
    with connect(edge) as s:
        t0 = time.perf_counter()
        s.sendall(b"last words")
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        got = b""
        while chunk := s.recv(100):
            got += chunk
        took = time.perf_counter() - t0
    assert got == b"last words"
    assert took >= 0.050, took


def test_closed_toxic_connections_are_forgotten(
    server: ProxyServer, api: ToxiproxyClient, edge: int
) -> None:
    api.add_toxic("edge", type="latency", attributes={"latency": 1})
    proxy = server.proxies["edge"]
    settled = 0
    for round_ in range(3):
        socks = [connect(edge) for _ in range(20)]
        for s in socks:
            assert _rtt(s, 10) >= 0.001
            s.close()
        assert until(lambda: server.counters("edge").connections_active == 0)
        assert until(lambda: not proxy.native_conns and not proxy.connections)
        if round_ == 0:  # emptied pipes are pooled for reuse: count from here
            time.sleep(0.05)
            settled = open_fds()
    # A leak would be one socket pair per connection (40 a round); a pooled pipe is two.
    assert until(lambda: open_fds() <= settled + 4), (settled, open_fds())
    counters = server.counters("edge")
    assert counters.connections_total == 60
    assert counters.bytes_sent_downstream == counters.bytes_received_upstream == 600
