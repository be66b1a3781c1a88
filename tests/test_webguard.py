"""The browser guard every faultday API asks before it acts (faultday_wire.webguard)."""

from __future__ import annotations

import pytest

from faultday_wire.webguard import (
    ADMIN_PREFIX,
    ALLOWED_HOSTS_ENV,
    MUTATING_METHODS,
    Refusal,
    allowed_hosts_from_env,
    check_request,
    check_route,
)

CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0"
# What the harness and the official clients send (no Origin, JSON or no body).
CLIENT_AGENTS = [
    "python-httpx/0.28.1",
    "OpenAI/Python 2.8.0",
    "python-client/1.12.0 python/3.11.9",  # qdrant-client
    "python/gevent-http-client-2.3.1",  # tritonclient
    "Python-urllib/3.11",
    "curl/8.5.0",
    "toxiproxy-cli",
    "Go-http-client/1.1",
]
ALL_METHODS = sorted({"GET", "HEAD", "OPTIONS", *MUTATING_METHODS})
SAFE_METHODS = sorted(set(ALL_METHODS) - MUTATING_METHODS)


def check(
    method: str = "GET",
    *,
    listen: str = "127.0.0.1",
    allowed: tuple[str, ...] = (),
    **headers: str,
) -> Refusal | None:
    pairs = [(name.replace("_", "-"), value) for name, value in headers.items()]
    return check_request(method, pairs, listen_host=listen, allowed_hosts=allowed)


def refused(result: Refusal | None, *words: str) -> bool:
    return (
        result is not None
        and result.status == 403
        and all(w.lower() in result.message.lower() for w in words)
    )


# --- what passes -----------------------------------------------------------------------------


@pytest.mark.parametrize("agent", CLIENT_AGENTS)
@pytest.mark.parametrize("method", ALL_METHODS)
def test_clients_pass_with_json_or_no_body(agent: str, method: str) -> None:
    assert check(method, Host="127.0.0.1:8474", User_Agent=agent) is None
    json_call = check(
        method, Host="localhost:8474", User_Agent=agent, Content_Type="application/json"
    )
    assert json_call is None
    assert check(method, Host="localhost", Content_Type="Application/JSON; charset=utf-8") is None


def test_no_headers_at_all_pass() -> None:
    """HTTP/1.0 without Host, a raw socket client: nothing a browser would send."""
    for method in ALL_METHODS:
        assert check_request(method, [], listen_host="127.0.0.1") is None


def test_bytes_headers_as_asgi_and_h11_give_them() -> None:
    asgi = [(b"host", b"127.0.0.1:1"), (b"content-type", b"application/json")]
    assert check_request("POST", asgi, listen_host="127.0.0.1") is None
    bad = [(b"Host", b"127.0.0.1:1"), (b"User-Agent", CHROME.encode())]
    assert refused(check_request("GET", bad, listen_host="127.0.0.1"), "browser")


# --- rule 1: browsers, as Toxiproxy does ------------------------------------------------------


@pytest.mark.parametrize("method", ALL_METHODS)
def test_browser_user_agent_refused_on_every_method(method: str) -> None:
    result = check(method, Host="127.0.0.1:8474", User_Agent=CHROME)
    assert refused(result, "browser", "Mozilla/5.0")
    assert result is not None
    assert len(result.message) < 120  # the agent is clipped, not echoed whole


def test_browser_rule_is_toxiproxys_prefix_match() -> None:
    """``strings.HasPrefix(r.UserAgent(), "Mozilla/")``: case and position matter."""
    assert check(Host="localhost", User_Agent="mozilla/5.0") is None
    assert check(Host="localhost", User_Agent="curl/8 Mozilla/5.0") is None
    assert refused(check(Host="localhost", User_Agent="Mozilla/"), "browser")


def test_refusal_quotes_only_printable_ascii() -> None:
    result = check(Host="localhost", User_Agent="Mozilla/\x00\x7f<script>é")
    assert result is not None
    assert all(" " <= c <= "~" or c == "…" for c in result.message)


# --- rule 2: foreign origins ------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "http://127.0.0.1:9999",  # another local port is another origin
        "http://localhost:8474",  # same machine, but not the name this request used
        "https://127.0.0.1:8474",
        "file://",
        "http://127.0.0.1:8474.evil.example",
        "http://127.0.0.1:bad",
    ],
)
def test_foreign_origin_refused(origin: str) -> None:
    result = check("GET", Host="127.0.0.1:8474", Origin=origin)
    assert refused(result, "cross-origin")


def test_own_origin_passes() -> None:
    assert check("POST", Host="127.0.0.1:8474", Origin="http://127.0.0.1:8474") is None
    assert check("POST", Host="LOCALHOST", Origin="http://localhost:80") is None
    assert check("POST", Host="[::1]:8474", Origin="http://[::1]:8474") is None


def test_origin_without_host_refused() -> None:
    assert refused(check_request("GET", [("Origin", "http://x")], listen_host="::"), "origin")


# --- rule 3: mutating requests must be JSON ---------------------------------------------------


@pytest.mark.parametrize("method", sorted(MUTATING_METHODS))
@pytest.mark.parametrize(
    "ctype",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "",
        "application/jsonx",
        "application/json-patch+json",
    ],
)
def test_mutating_non_json_refused(method: str, ctype: str) -> None:
    result = check(method, Host="localhost:8474", Content_Type=ctype)
    assert refused(result, method, "application/json")


@pytest.mark.parametrize("method", SAFE_METHODS)
def test_reads_may_carry_any_content_type(method: str) -> None:
    assert check(method, Host="localhost", Content_Type="text/plain") is None


def test_two_content_types_one_foreign_refused() -> None:
    pairs = [("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    assert refused(check_request("POST", pairs, listen_host="127.0.0.1"), "text/plain")


# --- rule 4: Host (DNS rebinding) -------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:1",
        "LocalHost.",
        "app.localhost:8000",
        "127.0.0.1",
        "127.8.9.10:80",
        "[::1]",
        "[::1]:8474",
        "[::ffff:127.0.0.1]:1",
    ],
)
@pytest.mark.parametrize("listen", ["127.0.0.1", "0.0.0.0", "::", "10.1.2.3", "gpu-box"])
def test_loopback_hosts_pass_on_any_listen(host: str, listen: str) -> None:
    assert check("POST", Host=host, listen=listen) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8474",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "10.1.2.3:8474",  # a real address, but the server is bound to loopback only
        "user@127.0.0.1",
        "127.0.0.1:80:80",
        "127.0.0.1:x",
        "[::1",
        "[evil]:1",
        "0x7f.1",  # browsers canonicalise numeric hosts; this form never comes from one
    ],
)
def test_rebinding_and_malformed_hosts_refused_on_loopback_listen(host: str) -> None:
    result = check("GET", Host=host, listen="127.0.0.1")
    assert refused(result, "Host", ALLOWED_HOSTS_ENV)


def test_specific_listen_address_is_accepted() -> None:
    assert check(Host="10.1.2.3:8474", listen="10.1.2.3") is None
    assert check(Host="[fd00::5]:1", listen="fd00::5") is None
    assert check(Host="GPU-Box:8000", listen="gpu-box") is None
    assert refused(check(Host="10.1.2.4", listen="10.1.2.3"), "Host")


def test_wildcard_listen_accepts_ip_literals_not_names() -> None:
    for listen in ("0.0.0.0", "::", ""):
        assert check(Host="10.1.2.3:8474", listen=listen) is None
        assert check(Host="[2001:db8::1]:8474", listen=listen) is None
        assert refused(check(Host="evil.example", listen=listen), "Host")


def test_allowed_hosts_exact_suffix_and_any() -> None:
    svc = "qdrant.gameday.svc.cluster.local:6333"
    assert refused(check(Host=svc, listen="0.0.0.0"), "Host")
    assert check(Host=svc, listen="0.0.0.0", allowed=(".svc.cluster.local",)) is None
    assert check(Host="qdrant:6333", listen="0.0.0.0", allowed=("Qdrant",)) is None
    assert refused(check(Host="xqdrant", listen="0.0.0.0", allowed=("qdrant",)), "Host")
    assert refused(check(Host="evilcluster.local", allowed=(".cluster.local",)), "Host")
    assert check(Host="anything.example", allowed=("*",)) is None


def test_two_host_headers_refused() -> None:
    pairs = [("Host", "127.0.0.1"), ("Host", "evil.example")]
    assert refused(check_request("GET", pairs, listen_host="127.0.0.1"), "Host")


def test_allowed_hosts_from_env() -> None:
    assert allowed_hosts_from_env({}) == ()
    env = {ALLOWED_HOSTS_ENV: " Qdrant, .svc.cluster.local ,, "}
    assert allowed_hosts_from_env(env) == ("qdrant", ".svc.cluster.local")


def test_the_issues_attack_is_refused() -> None:
    """Issue 16: a page's simple cross-origin POST /proxies got 201."""
    result = check(
        "POST",
        Host="127.0.0.1:8474",
        Origin="http://evil.example",
        Content_Type="text/plain",
        User_Agent=CHROME,
    )
    assert refused(result)


# --- the route policy -------------------------------------------------------------------------

ADMIN = f"{ADMIN_PREFIX}faults"
PEER = [("Host", "llmsim:8000"), ("Content-Type", "application/json")]


@pytest.mark.parametrize("listen", ["0.0.0.0", "::", "10.1.2.3"])
def test_data_plane_of_a_wide_server_takes_service_names(listen: str) -> None:
    """Peers call it as llmsim:8000 (Compose) or *.svc.cluster.local (Kubernetes)."""
    assert check_route("POST", "/v1/chat/completions", PEER, listen_host=listen) is None
    assert refused(check_route("POST", ADMIN, PEER, listen_host=listen), "Host")
    assert check_route("POST", ADMIN, PEER, listen_host=listen, allowed_hosts=("llmsim",)) is None


@pytest.mark.parametrize("listen", ["127.0.0.1", "localhost", "::1", "[::1]"])
def test_every_route_of_a_loopback_server_checks_host(listen: str) -> None:
    for path in ("/v1/chat/completions", "/health", ADMIN, ADMIN_PREFIX.rstrip("/")):
        assert refused(check_route("POST", path, PEER, listen_host=listen), "Host")


@pytest.mark.parametrize("listen", ["0.0.0.0", "127.0.0.1"])
def test_data_plane_keeps_the_browser_rules(listen: str) -> None:
    host = [("Host", "127.0.0.1:1")]
    browser = [*host, ("User-Agent", CHROME)]
    foreign = [*host, ("Origin", "http://evil.example")]
    form = [*host, ("Content-Type", "application/x-www-form-urlencoded")]
    path = "/collections/docs/points/delete"
    assert refused(check_route("GET", "/v1/models", browser, listen_host=listen), "browser")
    assert refused(check_route("GET", "/v1/models", foreign, listen_host=listen), "cross-origin")
    assert refused(check_route("POST", path, form, listen_host=listen), "application/json")


def test_admin_prefix_is_a_path_segment() -> None:
    """/administrator is not an admin route; /admin and /admin/x are."""
    wide = "0.0.0.0"
    assert check_route("GET", "/administrator", PEER, listen_host=wide) is None
    assert refused(check_route("GET", "/admin", PEER, listen_host=wide), "Host")
