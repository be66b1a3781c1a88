"""The network injectors, through the Toxiproxy-API client, against faultday's proxy."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from tests.proxy.conftest import EchoServer, free_port

from faultday.core.targets import Revert, Target, TargetKind
from faultday.errors import InjectionError
from faultday.injectors.base import Injector, injector_registry
from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient

NETWORK = [
    "latency",
    "outage",
    "reset",
    "timeout",
    "bandwidth",
    "slicer",
    "limit_data",
    "http_error",
    "http_latency",
    "stream_cut",
    "stream_stall",
    "stream_drip",
]


@dataclass
class Ctx:
    run_dir: Path
    live: bool = True

    def target(self, name: str) -> Target:
        raise KeyError(name)

    def restart(self, component: str, *, timeout: float) -> None:
        raise AssertionError("network injectors never restart components")


def edge_target(server: ProxyServer, proxy: str) -> Target:
    return Target(
        name=f"agent->{proxy}", kind=TargetKind.EDGE, proxy_api=server.api_url, proxy_name=proxy
    )


def run(
    name: str, ctx: Ctx, target: Target, raw: dict[str, object], fault: str = "f1"
) -> tuple[Injector, Revert]:
    inj = injector_registry().get(name)()
    params = inj.parse(raw)  # type: ignore[arg-type]
    revert = inj.prepare(ctx, target, params, fault=fault)
    # The ledger stores the revert as JSON before inject: it must round-trip.
    revert = Revert.from_json(revert.to_json())
    inj.inject(ctx, target, params, revert)
    return inj, revert


def rtt(port: int) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        s.sendall(b"ping")
        assert s.recv(10) == b"ping"
        return time.perf_counter() - t0


@pytest.fixture
def api(inproc: ProxyServer) -> ToxiproxyClient:
    return ToxiproxyClient(inproc.api_url)


def test_all_registered_for_edges() -> None:
    registry = injector_registry()
    for name in NETWORK:
        cls = registry.get(name)
        assert cls.target_kinds == frozenset({TargetKind.EDGE}), name


def test_latency_inject_and_idempotent_revert(
    tmp_path: Path, inproc: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    port = api.create_proxy("redis", upstream=echo.addr).port
    ctx = Ctx(tmp_path)
    inj, revert = run(
        "latency", ctx, edge_target(inproc, "redis"), {"latency": "80ms"}, "slow-redis"
    )
    assert revert.data["toxics"] == ["faultday-slow-redis-latency"]
    (toxic,) = api.toxics("redis")
    assert toxic.name == "faultday-slow-redis-latency"
    assert toxic.attributes["latency"] == 80
    assert rtt(port) >= 0.079
    inj.revert(ctx, revert)
    assert api.toxics("redis") == []
    assert min(rtt(port) for _ in range(3)) < 0.05
    inj.revert(ctx, revert)  # again: already gone is fine


def test_both_streams_and_reinject_after_crash(
    tmp_path: Path, inproc: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    api.create_proxy("e", upstream=echo.addr)
    ctx = Ctx(tmp_path)
    raw = {"rate": 50, "stream": "both"}
    inj, revert = run("bandwidth", ctx, edge_target(inproc, "e"), raw)
    names = sorted(t.name for t in api.toxics("e"))
    assert names == ["faultday-f1-bandwidth-downstream", "faultday-f1-bandwidth-upstream"]
    # A harness that died after inject runs the same fault again: updated in place, no 409.
    run("bandwidth", ctx, edge_target(inproc, "e"), {"rate": 70, "stream": "both"})
    assert {t.attributes["rate"] for t in api.toxics("e")} == {70}
    inj.revert(ctx, revert)
    assert api.toxics("e") == []


def test_outage_refuses_then_revert_restores(
    tmp_path: Path, inproc: ProxyServer, api: ToxiproxyClient, echo: EchoServer
) -> None:
    port = api.create_proxy("qdrant", upstream=echo.addr).port
    ctx = Ctx(tmp_path)
    inj, revert = run("outage", ctx, edge_target(inproc, "qdrant"), {})
    assert revert.action == "enable_proxy"
    with pytest.raises(ConnectionRefusedError):
        rtt(port)
    inj.revert(ctx, revert)
    assert rtt(port) < 0.5
    inj.revert(ctx, revert)
    api.delete_proxy("qdrant")
    inj.revert(ctx, revert)  # proxy gone: nothing to do


def test_revert_when_proxy_server_is_gone(tmp_path: Path) -> None:
    dead = Target(
        name="a->b",
        kind=TargetKind.EDGE,
        proxy_api=f"http://127.0.0.1:{free_port()}",
        proxy_name="b",
    )
    ctx = Ctx(tmp_path, live=False)
    for name in ("latency", "outage"):
        inj = injector_registry().get(name)()
        params = inj.parse({"latency": "10ms"} if name == "latency" else {})
        revert = inj.prepare(ctx, dead, params, fault="f")
        inj.revert(ctx, revert)  # toxics died with their server: done, not an error
        with pytest.raises(InjectionError):
            inj.inject(ctx, dead, params, revert)


def test_http_error_injector_against_streaming_server(
    tmp_path: Path, inproc: ProxyServer, api: ToxiproxyClient, sse_server: str
) -> None:
    port = api.create_proxy("llm", upstream=sse_server).port
    ctx = Ctx(tmp_path)
    raw = {"status": 503, "retry_after": "3s", "first_n": 1}
    inj, revert = run("http_error", ctx, edge_target(inproc, "llm"), raw)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        first = http.get("/hello")
        assert (first.status_code, first.headers["retry-after"]) == (503, "3")
        assert http.get("/hello").status_code == 200
    inj.revert(ctx, revert)
    assert inproc.counters("llm").responses(503) == 1


def test_params_and_targets_are_validated(tmp_path: Path, inproc: ProxyServer) -> None:
    inj = injector_registry().get("latency")()
    with pytest.raises(ValidationError):
        inj.parse({"latency": 80})  # a bare number has no unit
    with pytest.raises(ValidationError):
        inj.parse({"latency": "80ms", "jiter": "1ms"})
    component = Target(name="redis", kind=TargetKind.COMPONENT)
    with pytest.raises(InjectionError):
        inj.prepare(Ctx(tmp_path), component, inj.parse({"latency": "1ms"}), fault="f")
    names = {
        injector_registry().get(n)().parse(r).__class__.__name__
        for n, r in [
            ("stream_cut", {"after_events": 3, "mode": "close"}),
            ("stream_stall", {"after_events": 1, "stall": "2s"}),
            ("stream_drip", {"interval": "200ms"}),
            ("reset", {"after": "1s"}),
            ("timeout", {}),
            ("slicer", {"delay": "5ms"}),
            ("limit_data", {"bytes": 100}),
            ("http_latency", {"latency": "1s"}),
        ]
    }
    assert len(names) == 8
