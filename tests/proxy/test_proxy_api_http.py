"""Issue 16.4: the control API's own HTTP handling, driven with raw bytes on real sockets."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from pydantic import BaseModel
from tests.proxy.conftest import EchoServer, free_port

from faultday.proxy import ProxyServer
from faultday.proxy.api import MAX_BODY, MAX_DEPTH, decode_body
from faultday.proxy.models import (
    ATTRS,
    HttpErrorAttrs,
    LatencyAttrs,
    StreamCutAttrs,
    dump_attributes,
)

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def api(inproc: ProxyServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=inproc.api_url, headers=JSON, timeout=5) as http:
        yield http


def raw(server: ProxyServer, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``data`` on one connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def responses(stream: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split a byte stream of HTTP/1.1 responses (each with a Content-Length)."""
    out = []
    while stream:
        head, _, rest = stream.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        size = int(headers["content-length"])
        out.append((int(lines[0].split()[1]), headers, rest[:size]))
        stream = rest[size:]
    return out


def request(
    method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {"Content-Length": str(len(body))}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def make_proxy(api: httpx.Client, name: str, upstream: str, listen: str = "127.0.0.1:0") -> dict:
    r = api.post("/proxies", json={"name": name, "upstream": upstream, "listen": listen})
    assert r.status_code == 201, r.text
    out: dict = r.json()
    return out


def echo_via(listen: str) -> bytes:
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=3) as s:
        s.sendall(b"ping")
        return s.recv(16)


# ---- request desync ----------------------------------------------------------------------
def test_oversized_body_cannot_smuggle_a_request(
    inproc: ProxyServer, api: httpx.Client, echo: EchoServer
) -> None:
    make_proxy(api, "victim", echo.addr)
    hidden = request("DELETE", "/proxies/victim")
    body = hidden + b" " * (MAX_BODY + 1 - len(hidden))
    got = responses(raw(inproc, request("POST", "/proxies", body)))
    # One answer, then the connection closed: the body was never parsed as a request.
    assert [(status, h.get("connection")) for status, h, _ in got] == [(400, "close")]
    assert f"over {MAX_BODY} bytes" in json.loads(got[0][2])["error"]
    assert api.get("/proxies/victim").status_code == 200


def test_oversized_chunked_body_is_refused_and_closed(
    inproc: ProxyServer, api: httpx.Client, echo: EchoServer
) -> None:
    make_proxy(api, "victim", echo.addr)
    hidden = request("DELETE", "/proxies/victim")
    chunk = hidden + b" " * (MAX_BODY - len(hidden))
    body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk, len(hidden), hidden)
    got = responses(
        raw(inproc, request("POST", "/proxies", body, {"Transfer-Encoding": "chunked"}))
    )
    assert [status for status, _, _ in got] == [400]
    assert api.get("/proxies/victim").status_code == 200


def test_a_refused_body_after_a_good_request_still_answers_the_first(
    inproc: ProxyServer, api: httpx.Client
) -> None:
    good = request("GET", "/version")
    bad = request("POST", "/proxies", headers={"Content-Length": "abc"})
    got = responses(raw(inproc, good + bad))
    assert [status for status, _, _ in got] == [200, 400]


# ---- malformed requests each get a 400 with a message --------------------------------------
@pytest.mark.parametrize("length", ["abc", "-5", "1 2", "99999999999999999999999"])
def test_bad_content_length_is_a_400_and_closes(inproc: ProxyServer, length: str) -> None:
    got = responses(raw(inproc, request("POST", "/proxies", b"{}", {"Content-Length": length})))
    assert len(got) == 1
    status, headers, body = got[0]
    assert (status, headers.get("connection")) == (400, "close")
    assert json.loads(body)["error"]  # a message, not an empty answer


SMUGGLING = {
    "two content-lengths": b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
    "te and cl": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "te not chunked last": b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    "space before colon": b"Content-Length : 2\r\n\r\n{}",
    "folded header": b"X-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    "bare lf": b"Content-Length: 2\n\n{}",
}


@pytest.mark.parametrize("tail", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_ambiguous_framing_is_refused_and_closed(
    inproc: ProxyServer, api: httpx.Client, echo: EchoServer, tail: bytes
) -> None:
    make_proxy(api, "victim", echo.addr)
    head = b"POST /proxies/victim/toxics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    got = responses(raw(inproc, head + tail + request("DELETE", "/proxies/victim")))
    assert [(status, h.get("connection")) for status, h, _ in got] == [(400, "close")]
    assert api.get("/proxies/victim").status_code == 200


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"name": "\xff\xfe", "upstream": "127.0.0.1:1"}', "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested"),
        (b'{"name": "x", "upstream": "127.0.0.1:1", "enabled": NaN}', "NaN"),
        (b"", "EOF"),
    ],
    ids=["invalid-utf8", "100k-deep", "just-too-deep", "nan", "empty"],
)
def test_bad_json_is_a_400_and_the_connection_goes_on(
    inproc: ProxyServer, api: httpx.Client, body: bytes, says: str
) -> None:
    # The body was read whole, so the connection stays usable: the next request answers.
    stream = request("POST", "/proxies", body) + request(
        "GET", "/version", headers={"Content-Length": "0", "Connection": "close"}
    )
    got = responses(raw(inproc, stream))
    assert [status for status, _, _ in got] == [400, 200]
    assert says in json.loads(got[0][2])["error"]
    assert api.get("/proxies").json() == {}


def test_header_block_over_the_limit_is_refused(inproc: ProxyServer) -> None:
    got = responses(raw(inproc, request("GET", "/version", headers={"X-Big": "a" * 70_000})))
    assert [(status, h.get("connection")) for status, h, _ in got] == [(400, "close")]


# ---- header injection through a toxic's attributes --------------------------------------
@pytest.mark.parametrize(
    "content_type",
    ["text/plain\r\nSet-Cookie: evil=1", "text/plain\nX: y", "text/plain\x00", "no-slash", ""],
)
def test_http_error_content_type_must_be_a_media_type(
    api: httpx.Client, echo: EchoServer, content_type: str
) -> None:
    make_proxy(api, "p", echo.addr)
    bad = {"type": "http_error", "name": "e", "attributes": {"content_type": content_type}}
    r = api.post("/proxies/p/toxics", json=bad)
    assert r.status_code == 400, r.text
    assert "content_type" in r.json()["error"]
    assert api.get("/proxies/p/toxics").json() == []
    # An existing toxic cannot be updated into one either; it keeps its value.
    good = {"type": "http_error", "name": "e", "attributes": {"content_type": "text/plain"}}
    assert api.post("/proxies/p/toxics", json=good).status_code == 200
    r = api.patch("/proxies/p/toxics/e", json={"attributes": {"content_type": content_type}})
    assert r.status_code == 400
    assert api.get("/proxies/p/toxics/e").json()["attributes"]["content_type"] == "text/plain"


@pytest.mark.parametrize(
    "content_type",
    [HttpErrorAttrs().content_type, "text/plain; charset=utf-8", 'text/x; a="b c"; d=e'],
)
def test_valid_media_types_pass(api: httpx.Client, echo: EchoServer, content_type: str) -> None:
    make_proxy(api, "p", echo.addr)
    body = {"type": "http_error", "attributes": {"content_type": content_type}}
    assert api.post("/proxies/p/toxics", json=body).status_code == 200


# ---- a failed update leaves the proxy as it was ----------------------------------------------
def test_listen_in_use_leaves_the_proxy_serving(api: httpx.Client, echo: EchoServer) -> None:
    before = make_proxy(api, "agent_to_qdrant", echo.addr)
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        taken = f"127.0.0.1:{blocker.getsockname()[1]}"
        r = api.patch("/proxies/agent_to_qdrant", json={"listen": taken})
        assert r.status_code == 500
        assert "in use" in r.json()["error"]
    assert api.get("/proxies/agent_to_qdrant").json() == before
    assert echo_via(before["listen"]) == b"ping"


def test_enabling_on_an_address_in_use_leaves_it_disabled(
    api: httpx.Client, echo: EchoServer
) -> None:
    make_proxy(api, "p", echo.addr)
    api.patch("/proxies/p", json={"enabled": False})
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        taken = f"127.0.0.1:{blocker.getsockname()[1]}"
        r = api.patch("/proxies/p", json={"listen": taken, "enabled": True})
        assert r.status_code == 500
    after = api.get("/proxies/p").json()
    assert after["enabled"] is False
    assert after["listen"] != taken


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999", "127.0.0.1:"])
def test_bad_listen_is_a_400_and_changes_nothing(
    api: httpx.Client, echo: EchoServer, listen: str
) -> None:
    before = make_proxy(api, "p", echo.addr)
    r = api.patch("/proxies/p", json={"listen": listen})
    assert r.status_code == 400, r.text
    assert api.get("/proxies/p").json() == before
    assert echo_via(before["listen"]) == b"ping"


def test_move_keeps_toxics_and_serves_on_the_new_address(
    api: httpx.Client, echo: EchoServer
) -> None:
    before = make_proxy(api, "p", echo.addr)
    api.post("/proxies/p/toxics", json={"type": "latency", "name": "lat"})
    new = f"127.0.0.1:{free_port()}"
    r = api.patch("/proxies/p", json={"listen": new})
    assert r.status_code == 200, r.text
    assert (r.json()["listen"], [t["name"] for t in r.json()["toxics"]]) == (new, ["lat"])
    assert echo_via(new) == b"ping"
    with pytest.raises(ConnectionRefusedError):
        echo_via(before["listen"])


# ---- populate is all or nothing ------------------------------------------------------------
def test_populate_failing_batch_changes_nothing(api: httpx.Client, echo: EchoServer) -> None:
    kept = make_proxy(api, "kept", echo.addr)
    api.post("/proxies/kept/toxics", json={"type": "latency", "name": "lat"})
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        taken = f"127.0.0.1:{blocker.getsockname()[1]}"
        batch = [
            {"name": "first", "upstream": echo.addr},
            {"name": "kept", "upstream": "127.0.0.1:1", "listen": f"127.0.0.1:{free_port()}"},
            {"name": "second", "upstream": echo.addr, "listen": taken},
        ]
        r = api.post("/populate", json=batch)
        assert r.status_code == 500, r.text
        assert r.json()["proxies"] == []
    assert set(api.get("/proxies").json()) == {"kept"}
    assert api.get("/proxies/kept").json() == {
        **kept,
        "toxics": api.get("/proxies/kept/toxics").json(),
    }
    assert [t["name"] for t in api.get("/proxies/kept/toxics").json()] == ["lat"]
    assert echo_via(kept["listen"]) == b"ping"


def test_populate_refuses_a_name_given_twice(api: httpx.Client, echo: EchoServer) -> None:
    batch = [{"name": "a", "upstream": echo.addr}, {"name": "a", "upstream": echo.addr}]
    r = api.post("/populate", json=batch)
    assert r.status_code == 400
    assert "at proxy 2" in r.json()["error"]
    assert api.get("/proxies").json() == {}


# ---- keep-alive, pipelining, half-close ------------------------------------------------------
def test_pipelined_requests_are_answered_in_order(inproc: ProxyServer, echo: EchoServer) -> None:
    # POST /proxies awaits (it listens); the toxic after it must wait for it, not overtake it.
    create = json.dumps({"name": "x", "upstream": echo.addr}).encode()
    toxic = json.dumps({"type": "latency", "name": "lat"}).encode()
    stream = (
        request("POST", "/proxies", create)
        + request("POST", "/proxies/x/toxics", toxic)
        + request("GET", "/proxies/x", headers={"Content-Length": "0", "Connection": "close"})
    )
    got = responses(raw(inproc, stream))
    assert [status for status, _, _ in got] == [201, 200, 200]
    assert [t["name"] for t in json.loads(got[2][2])["toxics"]] == ["lat"]
    assert len({h["x-toxiproxy-request-id"] for _, h, _ in got}) == 3


def test_a_half_closed_client_still_gets_its_answer(inproc: ProxyServer) -> None:
    with socket.create_connection(("127.0.0.1", inproc.port), timeout=5) as s:
        s.sendall(request("GET", "/version"))
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert [status for status, _, _ in responses(out)] == [200]


def test_expect_100_continue_is_answered(inproc: ProxyServer, echo: EchoServer) -> None:
    # curl sends a body over 1 KiB only after "100 Continue" (or after waiting a second).
    body = json.dumps({"name": "x", "upstream": echo.addr}).encode()
    head = request("POST", "/proxies", headers={"Content-Length": str(len(body))})
    head = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    with socket.create_connection(("127.0.0.1", inproc.port), timeout=5) as s:
        s.sendall(head)
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert [status for status, _, _ in responses(out)] == [201]


# ---- the fast request path: what it must still do ---------------------------------------------
def test_a_request_in_one_byte_reads_is_framed_whole(inproc: ProxyServer, echo: EchoServer) -> None:
    # Every connection reads into one shared buffer: each read is framed before the next.
    create = json.dumps({"name": "x", "upstream": echo.addr}).encode()
    toxic = json.dumps({"type": "latency", "name": "lat", "attributes": {"latency": 7}}).encode()
    stream = request("POST", "/proxies", create) + request("POST", "/proxies/x/toxics", toxic)
    stream += request("GET", "/proxies/x", headers={"Content-Length": "0", "Connection": "close"})
    with socket.create_connection(("127.0.0.1", inproc.port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(stream)):
            s.send(stream[i : i + 1])
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    got = responses(out)
    assert [status for status, _, _ in got] == [201, 200, 200]
    assert json.loads(got[2][2])["toxics"][0]["attributes"] == {"latency": 7, "jitter": 0}


def test_a_body_larger_than_one_read_arrives_whole(api: httpx.Client, echo: EchoServer) -> None:
    make_proxy(api, "x", echo.addr)
    body = json.dumps({"type": "latency", "name": "lat", "attributes": {"latency": 3}})
    padded = body[:-1] + " " * (MAX_BODY // 2) + "}"  # several reads of the API's buffer
    r = api.post("/proxies/x/toxics", content=padded.encode())
    assert r.status_code == 200, r.text
    assert r.json()["attributes"]["latency"] == 3


@pytest.mark.parametrize(
    "target",
    ["/version", "/version?pretty=1", "/version#top", "//localhost/version", "/%76ersion"],
)
def test_request_targets_route_by_their_path(inproc: ProxyServer, target: str) -> None:
    got = responses(raw(inproc, request("GET", target, headers={"Connection": "close"})))
    assert [status for status, _, _ in got] == [200]
    assert json.loads(got[0][2])["version"].startswith("2.")


def test_the_guard_judges_every_request_on_a_kept_alive_connection(
    api: httpx.Client, echo: EchoServer
) -> None:
    # The guard's answers are remembered by method and headers: a change in either counts.
    evil = {"Origin": "http://evil.example"}
    text = {"Content-Type": "text/plain"}
    body = json.dumps({"name": "x", "upstream": echo.addr})
    statuses = [
        api.get("/version").status_code,
        api.get("/version", headers=evil).status_code,
        api.get("/version").status_code,
        api.post("/proxies", content=body, headers=text).status_code,
        api.post("/proxies", content=body).status_code,
        api.delete("/proxies/x", headers=evil).status_code,
        api.delete("/proxies/x").status_code,
    ]
    assert statuses == [200, 403, 200, 403, 201, 403, 204]


def test_request_ids_are_xids(api: httpx.Client) -> None:
    # zerolog's xid, as Toxiproxy sends it: 4 bytes of time, 5 of machine and process,
    # a 3-byte counter, in lower-case base32hex without padding.
    before = int(time.time())
    ids = [api.get("/version").headers["x-toxiproxy-request-id"] for _ in range(3)]
    after = int(time.time())
    raw_ids = [base64.b32hexdecode(i.upper() + "====") for i in ids]
    assert all(len(i) == 20 for i in ids)
    assert all(before <= int.from_bytes(r[:4], "big") <= after for r in raw_ids)
    assert len({r[4:9] for r in raw_ids}) == 1
    assert raw_ids[0][7:9] == (os.getpid() & 0xFFFF).to_bytes(2, "big")  # the server's, in-process
    counts = [int.from_bytes(r[9:], "big") for r in raw_ids]
    assert [(c - counts[0]) % (1 << 24) for c in counts] == [0, 1, 2]


@pytest.mark.parametrize(
    "attrs",
    [model() for model in ATTRS.values()]
    + [
        LatencyAttrs(latency=5, jitter=2),
        HttpErrorAttrs(status=500, body="é", content_type="text/plain; charset=utf-8", rate=0.5),
        StreamCutAttrs(after_events=3, mode="close"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_attributes_are_dumped_as_model_dump_would(attrs: BaseModel) -> None:
    assert dump_attributes(attrs) == attrs.model_dump(mode="json")


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "latency", "attributes": {"latency": 5}}',
        b'{"a": 1, "a": 2.0}',
        b'"\\ud800"',  # an escaped lone surrogate: only the json module takes it
        b"1e400",
        b"123456789012345678901234567890",
        b"[0.1, -0, 2.5e-3, 1.0]",
        b'{"\xc3\xa9": "\\u00e9\\n\\t", "b": [true, false, null]}',
        b" \r\n\t{}\n",
    ],
)
def test_bodies_read_as_the_json_module_reads_them(body: bytes) -> None:
    # repr: 1 and 1.0 are equal in Python, not in a toxic's attributes.
    assert repr(decode_body(body)) == repr(json.loads(body.decode("utf-8")))
