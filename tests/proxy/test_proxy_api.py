"""Toxiproxy 2.x API compatibility, driven by the toxiproxy-python client.

Runs against ``python -m faultday.proxy`` and, when ``toxiproxy-server`` is on
PATH, against the real Toxiproxy too (the skip reason says when it is not).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import httpx
import pytest
from tests.proxy.conftest import ApiServer, EchoServer
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists


@pytest.fixture
def toxi(api_server: ApiServer, client: object) -> Iterator[Toxiproxy]:
    server = Toxiproxy()
    server.update_api_consumer(api_server.host, api_server.port)
    return server


def roundtrip(port: int, payload: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def test_version_and_empty_list(toxi: Toxiproxy) -> None:
    assert toxi.running()
    assert b"2." in toxi.version()
    assert toxi.proxies() == {}


def test_create_list_get_destroy(toxi: Toxiproxy, echo: EchoServer) -> None:
    proxy = toxi.create(upstream=echo.addr, name="redis")
    assert proxy.enabled is True
    assert port_of(proxy.listen) > 0  # listen port 0 became an ephemeral port
    assert roundtrip(port_of(proxy.listen)) == b"ping"
    assert set(toxi.proxies()) == {"redis"}
    assert toxi.get_proxy("redis").upstream == echo.addr
    with pytest.raises(ProxyExists):
        toxi.create(upstream=echo.addr, name="redis")
    assert toxi.destroy(proxy)
    assert toxi.get_proxy("redis") is None
    with pytest.raises(ConnectionRefusedError):
        roundtrip(port_of(proxy.listen))


def test_toxics_add_list_destroy(toxi: Toxiproxy, echo: EchoServer) -> None:
    proxy = toxi.create(upstream=echo.addr, name="p")
    proxy.add_toxic(type="latency", attributes={"latency": 10, "jitter": 0})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="bw", attributes={"rate": 1000})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "bw"}  # default name <type>_<stream>
    assert toxics["latency_downstream"].attributes["latency"] == 10
    assert toxics["latency_downstream"].toxicity == 1.0
    assert toxics["bw"].stream == "upstream"
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency", attributes={"latency": 10})
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="no_such_toxic", name="x")
    proxy.destroy_toxic("bw")
    assert set(proxy.toxics()) == {"latency_downstream"}
    with pytest.raises(NotFound):
        proxy.destroy_toxic("bw")


def test_disable_refuses_and_closes_then_enable(toxi: Toxiproxy, echo: EchoServer) -> None:
    proxy = toxi.create(upstream=echo.addr, name="edge")
    port = port_of(proxy.listen)
    open_conn = socket.create_connection(("127.0.0.1", port), timeout=3)
    open_conn.sendall(b"a")
    assert open_conn.recv(10) == b"a"
    with proxy.down():
        assert toxi.get_proxy("edge").enabled is False
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=3)
        # The open connection was closed: EOF or a reset, never an answer.
        with contextlib.suppress(ConnectionResetError):
            assert open_conn.recv(10) == b""
    open_conn.close()
    assert toxi.get_proxy("edge").enabled is True
    assert roundtrip(port) == b"ping"  # same address again after enable


def test_reset_removes_toxics_and_enables(toxi: Toxiproxy, echo: EchoServer) -> None:
    proxy = toxi.create(upstream=echo.addr, name="r")
    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    proxy.disable()
    assert toxi.reset()
    again = toxi.get_proxy("r")
    assert again.enabled is True
    assert again.toxics() == {}
    assert roundtrip(port_of(again.listen)) == b"ping"


def test_populate_creates_and_keeps(toxi: Toxiproxy, echo: EchoServer) -> None:
    created = toxi.populate(
        [
            {"name": "a", "upstream": echo.addr, "listen": "127.0.0.1:0"},
            {"name": "b", "upstream": echo.addr, "listen": "127.0.0.1:0"},
        ]
    )
    assert {p.name for p in created} == {"a", "b"}
    assert set(toxi.proxies()) == {"a", "b"}


def test_raw_shapes_and_status_codes(
    api_server: ApiServer, client: object, echo: EchoServer
) -> None:
    base = api_server.api_url
    with httpx.Client(base_url=base, timeout=5) as http:
        r = http.post(
            "/proxies", json={"name": "x", "upstream": echo.addr, "listen": "127.0.0.1:0"}
        )
        assert r.status_code == 201
        assert set(r.json()) >= {"name", "listen", "upstream", "enabled", "toxics"}
        assert http.post("/proxies", json={"name": "x", "upstream": echo.addr}).status_code == 409
        assert http.get("/proxies/nope").status_code == 404
        assert http.get("/proxies/x/toxics/nope").status_code == 404
        assert http.post("/proxies", content=b"{not json").status_code == 400
        r = http.post("/proxies/x/toxics", json={"type": "latency", "attributes": {"latency": 5}})
        assert r.status_code == 200
        assert r.json() == {
            "name": "latency_downstream",
            "type": "latency",
            "stream": "downstream",
            "toxicity": 1.0,
            "attributes": {"latency": 5, "jitter": 0},
        }
        # POST on a toxic updates its attributes in place (others keep their values).
        r = http.post("/proxies/x/toxics/latency_downstream", json={"attributes": {"jitter": 2}})
        assert r.status_code == 200
        assert r.json()["attributes"] == {"latency": 5, "jitter": 2}
        assert http.get("/proxies/x/toxics").json()[0]["attributes"]["jitter"] == 2
        assert http.delete("/proxies/x/toxics/latency_downstream").status_code == 204
        assert http.post("/reset").status_code == 204
        assert http.delete("/proxies/x").status_code == 204
        assert http.delete("/proxies/x").status_code == 404
