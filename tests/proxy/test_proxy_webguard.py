"""Issue 16.2 on the proxy's control API: a web page cannot drive it (faultday_wire.webguard).

Every route is sent each browser-shaped attack of ``tests/webguard_http.py``; each
is refused with a 403 naming its rule and changes nothing. The harness's own
client and the Toxiproxy clients' shapes still pass (they are also driven by
test_proxy_api.py and test_toxiproxy_parity.py against the guarded server).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.proxy.conftest import EchoServer
from tests.webguard_http import HOST_ATTACK, assert_refused, attacks_for, send

from faultday.proxy import ProxyServer
from faultday.proxy.client import ToxiproxyClient

TOXIC = {"name": "t", "type": "latency", "attributes": {"latency": 1}}


def routes(upstream: str) -> list[tuple[str, str, object | None]]:
    """Every route of the API with a body that would succeed (method, path, body)."""
    proxy = {"name": "new", "upstream": upstream}
    return [
        ("GET", "/version", None),
        ("GET", "/metrics", None),
        ("GET", "/proxies", None),
        ("POST", "/proxies", proxy),
        ("POST", "/populate", [proxy]),
        ("POST", "/reset", None),
        ("GET", "/proxies/p", None),
        ("POST", "/proxies/p", {"enabled": False}),
        ("PATCH", "/proxies/p", {"enabled": False}),
        ("DELETE", "/proxies/p", None),
        ("GET", "/proxies/p/counters", None),
        ("GET", "/proxies/p/toxics", None),
        ("POST", "/proxies/p/toxics", {**TOXIC, "name": "u"}),
        ("GET", "/proxies/p/toxics/t", None),
        ("POST", "/proxies/p/toxics/t", {"attributes": {"latency": 9}}),
        ("PATCH", "/proxies/p/toxics/t", {"attributes": {"latency": 9}}),
        ("DELETE", "/proxies/p/toxics/t", None),
    ]


@pytest.fixture
def guarded(inproc: ProxyServer, echo: EchoServer) -> Iterator[ToxiproxyClient]:
    with ToxiproxyClient(inproc.api_url) as c:
        c.create_proxy("p", upstream=echo.addr)
        c.add_toxic("p", name="t", type="latency", attributes={"latency": 1})
        yield c


def snapshot(client: ToxiproxyClient) -> object:
    return {name: (p.listen, p.enabled, p.toxics) for name, p in client.proxies().items()}


@pytest.mark.parametrize(
    ("method", "path", "body"), routes("127.0.0.1:1"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_route_refuses_every_browser_attack(
    inproc: ProxyServer,
    guarded: ToxiproxyClient,
    method: str,
    path: str,
    body: object | None,
) -> None:
    before = snapshot(guarded)
    # A bodiless call carries no Content-Type, so the content-type rule has nothing to see.
    attacks = [a for a in attacks_for(method) if body is not None or not a.mutating_only]
    assert attacks
    for attack in attacks:
        assert_refused(inproc.api_url + path, method, body, attack)
    assert snapshot(guarded) == before
    # The same call without the attack is accepted (the guard refused the attack only).
    assert send(inproc.api_url + path, method, body).status_code < 400


def test_the_issues_page_cannot_create_a_relay_or_reset(
    inproc: ProxyServer, guarded: ToxiproxyClient
) -> None:
    page = {"Content-Type": "text/plain", "Origin": "http://evil.example"}
    body = b'{"name": "exfil", "upstream": "10.0.0.1:22", "listen": "127.0.0.1:0"}'
    r = httpx.post(inproc.api_url + "/proxies", content=body, headers=page, timeout=5)
    assert r.status_code == 403
    assert "exfil" not in guarded.proxies()
    assert httpx.post(inproc.api_url + "/reset", headers=page, timeout=5).status_code == 403
    assert [t.name for t in guarded.toxics("p")] == ["t"]


def test_bodiless_and_curl_shaped_calls_pass(inproc: ProxyServer, echo: EchoServer) -> None:
    # curl -X POST .../reset and curl -d '{...}' without -H: no Content-Type, or a JSON one.
    assert httpx.post(inproc.api_url + "/reset", timeout=5).status_code == 204
    body = b'{"name": "c", "upstream": "%s"}' % echo.addr.encode()
    r = httpx.post(inproc.api_url + "/proxies", content=body, timeout=5)
    assert r.status_code == 201, r.text


def test_the_harness_client_passes(inproc: ProxyServer, echo: EchoServer) -> None:
    with ToxiproxyClient(inproc.api_url) as c:
        assert c.version().startswith("2.")
        c.create_proxy("a", upstream=echo.addr)
        c.add_toxic("a", name="lat", type="latency", attributes={"latency": 1})
        c.update_toxic("a", "lat", attributes={"jitter": 1}, toxicity=0.5)
        assert c.set_enabled("a", False).enabled is False
        c.populate([{"name": "b", "upstream": echo.addr}])
        c.reset()
        assert c.delete_toxic("a", "lat") is False  # reset removed it
        assert c.delete_proxy("a") and c.delete_proxy("b")


def test_names_beyond_loopback_only_when_allowed(echo: EchoServer) -> None:
    name = HOST_ATTACK.headers["Host"]
    with ProxyServer() as plain:
        r = httpx.get(plain.api_url + "/proxies", headers={"Host": name}, timeout=5)
        assert r.status_code == 403
    with ProxyServer(allowed_hosts=(name,)) as allowing:
        r = httpx.get(allowing.api_url + "/proxies", headers={"Host": name}, timeout=5)
        assert r.status_code == 200
