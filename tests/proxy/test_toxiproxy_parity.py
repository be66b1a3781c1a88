"""Issue 16.1: the calls of Toxiproxy's official Go client, in the exact HTTP shapes it sends.

The shapes are read from ``github.com/Shopify/toxiproxy/v2/client`` 2.12
(``client.go``, ``proxy.go``): every request carries ``User-Agent: toxiproxy-cli``
and ``Content-Type: application/json``; a toxic is marshalled as ``{"name",
"type", "stream" (omitted when empty), "toxicity", "attributes"}`` with
``"attributes": null`` when none are given; ``UpdateToxic`` PATCHes ``{"attributes",
"toxicity"}``; ``Proxy.Save`` POSTs the whole proxy, ``"toxics"`` included. Each
test runs against ``python -m faultday.proxy`` and, when ``toxiproxy-server`` is
on PATH, against Toxiproxy 2.12 itself with the same expectations.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from tests.proxy.conftest import ApiServer, EchoServer, free_port

from faultday import __version__
from faultday.proxy.client import ToxiproxyClient
from faultday.proxy.models import ATTRS, TOXIPROXY_VERSION
from faultday.proxy.toxics import TCP_TYPES

GO_HEADERS = {"User-Agent": "toxiproxy-cli", "Content-Type": "application/json"}
REQUEST_ID = "X-Toxiproxy-Request-Id"


@pytest.fixture
def go(api_server: ApiServer, client: ToxiproxyClient) -> Iterator[httpx.Client]:
    """An HTTP client that sends what the Go client sends (clean server via ``client``)."""
    with httpx.Client(base_url=api_server.api_url, headers=GO_HEADERS, timeout=5) as http:
        yield http


def send(http: httpx.Client, method: str, path: str, body: object = ...) -> httpx.Response:
    # json.Marshal output, sent as bytes (the Go client's bytes.Reader), or no body at all.
    content = None if body is ... else json.dumps(body, separators=(",", ":")).encode()
    return http.request(method, path, content=content)


def go_toxic(
    type_: str,
    *,
    name: str = "",
    stream: str = "",
    toxicity: float = 1,
    attributes: dict[str, object] | None = None,
) -> dict[str, object]:
    """``client.Toxic`` as json.Marshal writes it (``stream`` has omitempty)."""
    body: dict[str, object] = {"name": name, "type": type_}
    if stream:
        body["stream"] = stream
    body.update(toxicity=toxicity, attributes=attributes)
    return body


def go_proxy(name: str, listen: str, upstream: str, *, enabled: bool = True) -> dict[str, object]:
    """``client.Proxy`` as json.Marshal writes it (``toxics`` is nil until read back)."""
    return {
        "name": name,
        "listen": listen,
        "upstream": upstream,
        "enabled": enabled,
        "toxics": None,
    }


def create(http: httpx.Client, name: str, upstream: str, listen: str = "127.0.0.1:0") -> dict:
    r = send(http, "POST", "/proxies", go_proxy(name, listen, upstream))
    assert r.status_code == 201, r.text
    out: dict = r.json()
    return out


def echo_once(port: int, s: socket.socket | None = None) -> bytes:
    conn = s or socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        conn.sendall(b"ping")
        return conn.recv(16)
    finally:
        if s is None:
            conn.close()


def error(r: httpx.Response) -> tuple[int, str]:
    # Toxiproxy writes the JSON via http.Error, which appends a newline.
    body = json.loads(r.text)
    assert body["status"] == r.status_code
    return r.status_code, body["error"]


# ---- attributes: null ---------------------------------------------------------------------
@pytest.mark.parametrize("type_", sorted(TCP_TYPES))
def test_null_attributes_are_the_toxics_defaults(
    go: httpx.Client, echo: EchoServer, type_: str
) -> None:
    create(go, "p", echo.addr)
    r = send(go, "POST", "/proxies/p/toxics", go_toxic(type_))
    assert r.status_code == 200, r.text
    toxic = r.json()
    # Toxiproxy builds each toxic with reflect.New: every attribute is Go's zero value.
    assert toxic["attributes"] == dict.fromkeys(ATTRS[type_].model_fields, 0)
    assert toxic["name"] == f"{type_}_downstream"
    assert toxic["stream"] == "downstream"
    assert toxic["toxicity"] == 1


# ---- PATCH and POST updates -----------------------------------------------------------------
@pytest.mark.parametrize("method", ["PATCH", "POST"])
def test_toxic_update_merges_attributes_and_toxicity(
    go: httpx.Client, echo: EchoServer, method: str
) -> None:
    create(go, "p", echo.addr)
    toxic = go_toxic("latency", name="lat", attributes={"latency": 100})
    assert send(go, "POST", "/proxies/p/toxics", toxic).status_code == 200
    r = send(go, method, "/proxies/p/toxics/lat", {"attributes": {"jitter": 5}, "toxicity": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["attributes"] == {"latency": 100, "jitter": 5}
    assert r.json()["toxicity"] == 0.5
    # UpdateToxic(name, -1, nil): attributes null and no toxicity change nothing.
    r = send(go, method, "/proxies/p/toxics/lat", {"attributes": None})
    assert r.status_code == 200, r.text
    assert (r.json()["attributes"], r.json()["toxicity"]) == ({"latency": 100, "jitter": 5}, 0.5)
    # Name, type and stream are not updatable (Toxiproxy decodes only attributes, toxicity).
    r = send(go, method, "/proxies/p/toxics/lat", {"stream": "upstream", "attributes": {}})
    assert r.json()["stream"] == "downstream"
    assert error(send(go, method, "/proxies/p/toxics/nope", {"attributes": None})) == (
        404,
        "toxic not found",
    )


@pytest.mark.parametrize("method", ["PATCH", "POST"])
def test_proxy_update_takes_the_saved_proxy(
    go: httpx.Client, echo: EchoServer, method: str
) -> None:
    proxy = create(go, "p", echo.addr)
    port = int(proxy["listen"].rsplit(":", 1)[1])
    # Proxy.Save on a created proxy: the whole proxy, read back with its toxics list.
    saved = {**proxy, "enabled": False}
    r = send(go, method, "/proxies/p", saved)
    assert r.status_code == 200, r.text
    assert r.json()["enabled"] is False
    with pytest.raises(ConnectionRefusedError):
        echo_once(port)
    r = send(go, method, "/proxies/p", {**saved, "enabled": True})
    assert r.json()["enabled"] is True
    assert r.json()["listen"] == proxy["listen"]
    assert echo_once(port) == b"ping"


# ---- populate keeps an unchanged proxy ------------------------------------------------------
def test_populate_keeps_a_proxy_given_by_another_name_for_its_address(
    go: httpx.Client, echo: EchoServer
) -> None:
    port = free_port()
    create(go, "p", echo.addr, listen=f"127.0.0.1:{port}")
    send(go, "POST", "/proxies/p/toxics", go_toxic("latency", name="lat"))
    with socket.create_connection(("127.0.0.1", port), timeout=3) as open_conn:
        assert echo_once(port, open_conn) == b"ping"
        batch = [go_proxy("p", f"localhost:{port}", echo.addr), go_proxy("q", "", echo.addr)]
        r = send(go, "POST", "/populate", batch)
        assert r.status_code == 201, r.text
        got = {p["name"]: p for p in r.json()["proxies"]}
        assert got["p"]["listen"] == f"127.0.0.1:{port}"
        assert [t["name"] for t in got["p"]["toxics"]] == ["lat"]
        assert echo_once(port, open_conn) == b"ping"  # the open connection survived
    # A changed proxy is replaced: new upstream, its toxics gone.
    r = send(go, "POST", "/populate", [go_proxy("p", f"127.0.0.1:{port}", "127.0.0.1:1")])
    assert r.status_code == 201, r.text
    assert r.json()["proxies"][0]["toxics"] == []
    assert r.json()["proxies"][0]["upstream"] == "127.0.0.1:1"


# ---- error texts and codes ------------------------------------------------------------------
def test_error_texts_and_status_codes(go: httpx.Client, echo: EchoServer) -> None:
    create(go, "p", echo.addr)
    assert error(send(go, "POST", "/proxies", go_proxy("p", "", echo.addr))) == (
        409,
        "proxy already exists",
    )
    assert error(send(go, "POST", "/proxies", go_proxy("", "", echo.addr))) == (
        400,
        "missing required field: name",
    )
    assert error(send(go, "POST", "/proxies", go_proxy("x", "", ""))) == (
        400,
        "missing required field: upstream",
    )
    batch = [go_proxy("a", "", echo.addr), go_proxy("", "", echo.addr)]
    assert error(send(go, "POST", "/populate", batch)) == (
        400,
        "missing required field: name at proxy 2",
    )
    batch = [go_proxy("a", "", "")]
    assert error(send(go, "POST", "/populate", batch)) == (
        400,
        "missing required field: upstream at proxy 1",
    )
    assert "a" not in go.get("/proxies").json()
    assert error(go.get("/proxies/nope")) == (404, "proxy not found")
    assert error(send(go, "PATCH", "/proxies/nope", go_proxy("nope", "", echo.addr))) == (
        404,
        "proxy not found",
    )
    assert error(go.delete("/proxies/nope")) == (404, "proxy not found")
    assert error(go.get("/proxies/p/toxics/nope")) == (404, "toxic not found")
    assert error(go.delete("/proxies/p/toxics/nope")) == (404, "toxic not found")
    toxic = go_toxic("latency", name="lat")
    assert send(go, "POST", "/proxies/p/toxics", toxic).status_code == 200
    assert error(send(go, "POST", "/proxies/p/toxics", toxic)) == (409, "toxic already exists")
    assert error(send(go, "POST", "/proxies/p/toxics", go_toxic("nope"))) == (
        400,
        "invalid toxic type",
    )
    assert error(send(go, "POST", "/proxies/p/toxics", go_toxic("latency", stream="sideways"))) == (
        400,
        "stream was invalid, can be either upstream or downstream",
    )
    status, text = error(send(go, "POST", "/proxies", b"{not json".decode()))
    assert status == 400 and text.startswith("bad request body")


# ---- a listen address in use: Go's net.Listen error, as Toxiproxy's TestCreateProxyPortConflict --
def test_a_listen_address_in_use_answers_gos_error_text(go: httpx.Client, echo: EchoServer) -> None:
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        port = blocker.getsockname()[1]
        in_use = (500, f"listen tcp 127.0.0.1:{port}: bind: address already in use")
        taken = f"localhost:{port}"  # resolved in the text, as Go resolves it
        assert error(send(go, "POST", "/proxies", go_proxy("test", taken, echo.addr))) == in_use
        assert error(send(go, "POST", "/populate", [go_proxy("test", taken, echo.addr)])) == in_use
        create(go, "moving", echo.addr)
        moved = send(go, "POST", "/proxies/moving", go_proxy("moving", taken, echo.addr))
        assert error(moved) == in_use
        assert "test" not in go.get("/proxies").json()

    # The port held by another proxy, then let go (Toxiproxy's own test, step by step).
    create(go, "mysql_master", echo.addr, listen=taken)
    assert error(send(go, "POST", "/proxies", go_proxy("test", taken, echo.addr))) == in_use
    assert go.delete("/proxies/mysql_master").status_code == 204
    assert create(go, "test", echo.addr, listen=taken)["listen"] == f"127.0.0.1:{port}"


# ---- request id, version ------------------------------------------------------------------
def test_every_answer_has_a_request_id(go: httpx.Client, echo: EchoServer) -> None:
    answers = [
        go.get("/version"),
        send(go, "POST", "/proxies", go_proxy("p", "", echo.addr)),
        go.get("/proxies"),
        go.get("/proxies/nope"),
        send(go, "POST", "/proxies/p/toxics", go_toxic("nope")),
        go.delete("/proxies/p"),
        send(go, "POST", "/reset"),
    ]
    assert [r.status_code for r in answers] == [200, 201, 200, 404, 400, 204, 204]
    ids = [r.headers.get(REQUEST_ID, "") for r in answers]
    assert all(len(i) == 20 and i.isalnum() for i in ids), ids  # zerolog's xid
    assert len(set(ids)) == len(ids)


def test_version_is_the_toxiproxy_api_version(go: httpx.Client, api_server: ApiServer) -> None:
    body = go.get("/version").json()
    assert body["version"].startswith("2.")  # clients check the API major version
    if api_server.kind == "faultday":
        assert body == {"version": TOXIPROXY_VERSION, "faultday": __version__}
