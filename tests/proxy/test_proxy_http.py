"""HTTP- and SSE-aware toxics against a real streaming HTTP server (uvicorn, keep-alive,
chunked), and the per-proxy counters they feed."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.proxy.conftest import free_port

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient


@pytest.fixture
def api(inproc: ProxyServer) -> Iterator[ToxiproxyClient]:
    with ToxiproxyClient(inproc.api_url) as c:
        yield c


@pytest.fixture
def llm(api: ToxiproxyClient, sse_server: str) -> Iterator[httpx.Client]:
    port = api.create_proxy("llm", upstream=sse_server).port
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        yield http


def sse_events(http: httpx.Client, path: str = "/sse?n=6") -> tuple[list[str], list[float], str]:
    """(data lines, arrival times, error class name or '') of one SSE stream."""
    data: list[str] = []
    times: list[float] = []
    error = ""
    try:
        with http.stream("GET", path) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                    times.append(time.perf_counter())
    except httpx.HTTPError as exc:
        error = type(exc).__name__
    return data, times, error


def test_plain_http_passes_and_is_counted(
    api: ToxiproxyClient, llm: httpx.Client, inproc: ProxyServer
) -> None:
    for _ in range(3):
        assert llm.get("/hello").json() == {"ok": True}
    assert llm.get("/status/404").status_code == 404
    body = b"0123456789" * 5000
    assert llm.post("/echo", content=iter([body[:20000], body[20000:]])).content == body  # chunked
    data, _, error = sse_events(llm)
    assert error == ""
    assert data == [f"token-{i}" for i in range(6)] + ["[DONE]"]
    snap = inproc.counters("llm")
    assert snap.connections_total == 1  # keep-alive: one connection for all of it
    assert snap.http_requests == 6
    assert snap.responses(200) == 5
    assert snap.responses(404) == 1
    assert snap.bytes_received_upstream == snap.bytes_sent_upstream > 50_000
    metrics = api.metrics()
    assert 'toxiproxy_proxy_received_bytes_total{direction="upstream"' in metrics
    assert 'faultday_proxy_http_responses_total{code="404",proxy="llm"} 1.0' in metrics
    assert api.counters("llm")["http_requests"] == 6


def test_http_error_first_n_with_retry_after(
    api: ToxiproxyClient, llm: httpx.Client, inproc: ProxyServer
) -> None:
    assert llm.get("/hello").status_code == 200  # opens the keep-alive connection
    api.add_toxic(
        "llm",
        type="http_error",
        attributes={"status": 429, "retry_after": 2, "body": '{"error":"slow down"}', "first_n": 2},
    )
    first = llm.get("/hello")
    assert first.status_code == 429
    assert first.headers["retry-after"] == "2"
    assert first.json() == {"error": "slow down"}
    assert llm.post("/echo", content=b"x" * 10000).status_code == 429  # body drained
    assert llm.get("/hello").status_code == 200  # first_n spent
    snap = inproc.counters("llm")
    assert snap.connections_total == 1
    assert snap.responses(429) == 2
    assert dict(snap.toxic_actions)["http_error"] == 2


def test_http_error_limit_time(api: ToxiproxyClient, llm: httpx.Client) -> None:
    api.add_toxic("llm", type="http_error", attributes={"status": 503, "limit_time": 300})
    assert llm.get("/hello").status_code == 503
    time.sleep(0.35)
    assert llm.get("/hello").status_code == 200


def test_http_error_rejects_unknown_attribute(api: ToxiproxyClient, llm: httpx.Client) -> None:
    with pytest.raises(Exception, match="400"):
        api.add_toxic("llm", type="http_error", attributes={"statuz": 500})


def test_http_latency_is_per_request(api: ToxiproxyClient, llm: httpx.Client) -> None:
    assert llm.get("/hello").status_code == 200
    api.add_toxic("llm", type="http_latency", attributes={"latency": 200})
    for _ in range(3):
        t0 = time.perf_counter()
        assert llm.get("/hello").status_code == 200
        assert 0.199 <= time.perf_counter() - t0 < 0.4
    api.delete_toxic("llm", "http_latency_downstream")
    t0 = time.perf_counter()
    llm.get("/hello")
    assert time.perf_counter() - t0 < 0.15


@pytest.mark.parametrize(
    ("mode", "error"), [("reset", "ReadError"), ("close", "RemoteProtocolError")]
)
def test_stream_cut(api: ToxiproxyClient, llm: httpx.Client, mode: str, error: str) -> None:
    api.add_toxic("llm", type="stream_cut", attributes={"after_events": 3, "mode": mode})
    data, _, got_error = sse_events(llm)
    assert data == ["token-0", "token-1", "token-2"]
    assert got_error == error


def test_stream_cut_first_n_then_streams_flow(api: ToxiproxyClient, llm: httpx.Client) -> None:
    api.add_toxic("llm", type="stream_cut", attributes={"after_events": 1, "first_n": 1})
    assert sse_events(llm)[0] == ["token-0"]
    data, _, error = sse_events(llm)
    assert error == ""
    assert len(data) == 7


def test_stream_stall_holds_then_continues(api: ToxiproxyClient, llm: httpx.Client) -> None:
    api.add_toxic("llm", type="stream_stall", attributes={"after_events": 2, "stall": 400})
    data, times, error = sse_events(llm)
    assert error == ""
    assert len(data) == 7
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.38 <= gaps[1] < 0.8, gaps  # between event 2 and 3
    assert max(gaps[2:]) < 0.1


def test_stream_stall_forever_released_by_removal(
    api: ToxiproxyClient, llm: httpx.Client, inproc: ProxyServer
) -> None:
    api.add_toxic("llm", type="stream_stall", attributes={"after_events": 1, "stall": 0})
    import threading

    def remove_later() -> None:
        time.sleep(0.3)
        api.delete_toxic("llm", "stream_stall_downstream")

    t = threading.Thread(target=remove_later)
    t.start()
    t0 = time.perf_counter()
    data, _, error = sse_events(llm)
    t.join()
    assert error == ""
    assert len(data) == 7
    assert 0.28 <= time.perf_counter() - t0 < 2.0


def test_stream_drip_spaces_events(api: ToxiproxyClient, llm: httpx.Client) -> None:
    api.add_toxic("llm", type="stream_drip", attributes={"interval": 60})
    data, times, error = sse_events(llm, "/sse?n=5")
    assert error == ""
    assert len(data) == 6
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # One client-side hiccup shortens the gap after it; the span and median cannot lie.
    assert times[-1] - times[0] >= 5 * 0.06 * 0.97, gaps
    assert statistics.median(gaps) >= 0.058, gaps


def test_tcp_toxic_on_http_edge_and_keepalive_survives(
    api: ToxiproxyClient, llm: httpx.Client
) -> None:
    api.add_toxic("llm", type="latency", attributes={"latency": 200})
    t0 = time.perf_counter()
    assert llm.get("/hello").status_code == 200
    assert time.perf_counter() - t0 >= 0.199
    api.delete_toxic("llm", "latency_downstream")
    t0 = time.perf_counter()
    assert llm.get("/hello").status_code == 200
    assert time.perf_counter() - t0 < 0.15


def test_dials_to_a_dead_upstream_are_counted(inproc: ProxyServer) -> None:
    """Retries at a dead replica never become HTTP requests; the proxy counts them anyway."""
    api = ToxiproxyClient(inproc.api_url)
    dead = free_port()  # nothing listens there
    proxy = api.create_proxy("dead", listen="127.0.0.1:0", upstream=f"127.0.0.1:{dead}")
    port = int(proxy.listen.rsplit(":", 1)[1])
    for _ in range(4):
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
    snap = inproc.counters("dead")
    assert snap.upstream_failures == 4
    assert snap.http_requests == 0
    assert 'faultday_proxy_upstream_failures_total{proxy="dead"} 4.0' in api.metrics()
