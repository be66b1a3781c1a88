"""A guard that keeps web pages off faultday's HTTP APIs.

A page open in the user's browser can send "simple" cross-origin requests (a
``text/plain`` or form POST needs no CORS preflight) to any address the browser
reaches, and a page on a rebound DNS name (``evil.example`` → ``127.0.0.1``) can
even read the answers. faultday's APIs create relays, kill engines and degrade
stores, so every server asks :func:`check_request` about each request before
it acts. A request is refused (403) when

1. its ``User-Agent`` begins with ``Mozilla/`` — every browser's does; this is
   Toxiproxy's own rule (``stopBrowsersMiddleware``), byte for byte;
2. it carries an ``Origin`` that is not the API's own (``http://`` + its
   ``Host``): browsers send ``Origin`` on cross-origin and on every POST;
   SDKs and curl send none;
3. it is a POST, PUT, PATCH or DELETE whose ``Content-Type`` is not
   ``application/json`` (parameters such as ``charset`` allowed): the types a
   page may send without a preflight are all other types. A request with no
   ``Content-Type`` at all passes, as curl and the clients send bodiless calls;
4. its ``Host`` is not a loopback name (``localhost``, ``*.localhost``,
   ``127.0.0.0/8``, ``[::1]``), the address the server listens on, or a name
   the operator allowed: a rebound DNS name arrives as ``Host: evil.example``.

Which addresses count as the listen address: a server bound to one address
accepts that address (or name) as it was given. A server bound to every address
(``0.0.0.0``, ``::``) accepts any IP literal: its real addresses cannot be
listed reliably (containers, NAT, published ports and cluster IPs reach it under
addresses it does not own), and DNS rebinding needs a *name* — a ``Host`` that
is an IP literal means the page itself was loaded from that IP, which is the
API's own origin. Names beyond loopback (a Kubernetes Service name, a Docker
Compose service name) are added through ``allowed_hosts``: an exact name, a
``.suffix`` for a domain and all its subdomains, or ``*`` for any host (which
turns the ``Host`` rule off; the servers use it on the routes that peers reach
by service name). The port in ``Host`` is not compared: port-forwards and
published ports change it on the way.

Which routes get which rules (:func:`check_route`, :class:`WebGuard`): the
fault/admin routes (``/admin/...``) get all four. The data-plane routes (the
vLLM-, Qdrant- and MCP-compatible APIs, health, metrics) get the first three,
and the ``Host`` rule only when the server listens on loopback: there every
caller is on the same machine and uses a loopback address, while a server bound
to a wider address is called by its peers under service names (``llmsim:8000``
in Compose, ``*.svc.cluster.local`` in Kubernetes) that no flag lists. The SDKs
that call the data plane (openai, qdrant-client, the MCP client, httpx, Locust)
send no ``Origin``, a non-browser ``User-Agent`` and JSON bodies, so they pass.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "ADMIN_PREFIX",
    "ALLOWED_HOSTS_ENV",
    "MUTATING_METHODS",
    "Refusal",
    "WebGuard",
    "allowed_hosts_from_env",
    "check_request",
    "check_route",
    "check_scope",
]

MUTATING_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Set by the operator (or a rendered manifest) to the extra names a server may be called by.
ALLOWED_HOSTS_ENV: Final = "FAULTDAY_ALLOWED_HOSTS"
FORBIDDEN: Final = 403
_BROWSER_PREFIX: Final = "Mozilla/"
_JSON_TYPE: Final = "application/json"
_WILDCARD_LISTEN: Final = frozenset({"", "0.0.0.0", "::", "[::]", "*"})
_HTTP_PORT: Final = 80
_SHOWN: Final = 48  # how much of a header value a refusal quotes
_READ: Final = frozenset({"user-agent", "content-type", "host", "origin"})
_READ_BYTES: Final = frozenset(name.encode() for name in _READ)

ADMIN_PREFIX: Final = "/admin/"
_ANY_HOST: Final = ("*",)

HeaderPairs = Iterable[tuple[str | bytes, str | bytes]]
# The ASGI callables, shaped as Starlette's (structural, so either side accepts the other).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused; the server answers ``status`` with ``message``."""

    status: int
    message: str


def check_request(
    method: str,
    headers: HeaderPairs,
    *,
    listen_host: str,
    allowed_hosts: Collection[str] = (),
) -> Refusal | None:
    """None when the request may proceed, else the :class:`Refusal` to answer.

    ``method`` is the request method (any case); ``headers`` the request's
    header pairs, names in any case, as ``str`` or raw ``bytes`` (an ASGI
    scope's ``headers``, h11's ``Request.headers``, a Starlette
    ``request.headers.items()``); ``listen_host`` the address the server is
    bound to, as given to it (``127.0.0.1``, ``0.0.0.0``, ``::1``, a name);
    ``allowed_hosts`` extra names for the ``Host`` rule (exact, ``.suffix``,
    or ``*``). Pure: reads nothing but its arguments.
    """
    fields = _collect(headers)
    for rule in (_user_agent, _content_type):
        refusal = rule(method.upper(), fields)
        if refusal is not None:
            return refusal
    return _host_and_origin(fields, listen_host=listen_host, allowed_hosts=allowed_hosts)


def check_route(
    method: str,
    path: str,
    headers: HeaderPairs,
    *,
    listen_host: str,
    allowed_hosts: Collection[str] = (),
) -> Refusal | None:
    """:func:`check_request` with the route policy: the ``Host`` rule on admin routes,
    and on every route of a server that listens on loopback."""
    admin = path == ADMIN_PREFIX.rstrip("/") or path.startswith(ADMIN_PREFIX)
    local = _listens_on_loopback(listen_host)
    hosts = tuple(allowed_hosts) if admin or local else _ANY_HOST
    return check_request(method, headers, listen_host=listen_host, allowed_hosts=hosts)


def check_scope(
    scope: Scope, *, listen_host: str, allowed_hosts: Collection[str] = ()
) -> Refusal | None:
    """:func:`check_route` on an ASGI HTTP scope (its method, path and headers)."""
    return check_route(
        scope["method"],
        scope["path"],
        scope["headers"],
        listen_host=listen_host,
        allowed_hosts=allowed_hosts,
    )


class WebGuard:
    """ASGI middleware: :func:`check_route` on every HTTP request, a JSON 403 when refused.

    ``error_body`` shapes the answer as the wrapped API shapes its errors
    (default ``{"detail": message}``, FastAPI's).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        listen_host: str,
        allowed_hosts: Collection[str] = (),
        error_body: Callable[[str], object] | None = None,
    ) -> None:
        self.app = app
        self.listen_host = listen_host
        self.allowed_hosts = tuple(allowed_hosts)
        self.error_body = error_body or _detail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = check_scope(
                scope, listen_host=self.listen_host, allowed_hosts=self.allowed_hosts
            )
            if refusal is not None:
                await self._answer(send, refusal)
                return
        await self.app(scope, receive, send)

    async def _answer(self, send: Send, refusal: Refusal) -> None:
        body = json.dumps(self.error_body(refusal.message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        # The body is left unread: the server drains it or closes the connection.
        await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _detail(message: str) -> object:
    return {"detail": message}


def allowed_hosts_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The extra host names in ``FAULTDAY_ALLOWED_HOSTS`` (comma-separated), if set."""
    raw = (os.environ if environ is None else environ).get(ALLOWED_HOSTS_ENV, "")
    return tuple(name.strip().lower() for name in raw.split(",") if name.strip())


# --- the rules ----------------------------------------------------------------------------


def _collect(headers: HeaderPairs) -> dict[str, list[str]]:
    """The four headers the rules read, by lower-cased name; every other header is skipped."""
    fields: dict[str, list[str]] = {}
    for name, value in headers:
        if isinstance(name, bytes):
            raw = name.lower()
            if raw not in _READ_BYTES:
                continue
            key = raw.decode("latin-1")
        else:
            key = name.lower()
            if key not in _READ:
                continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        fields.setdefault(key, []).append(text.strip())
    return fields


def _user_agent(method: str, fields: dict[str, list[str]]) -> Refusal | None:
    for agent in fields.get("user-agent", ()):
        if agent.startswith(_BROWSER_PREFIX):
            return _refuse(f"browser requests are refused (User-Agent {_show(agent)})")
    return None


def _content_type(method: str, fields: dict[str, list[str]]) -> Refusal | None:
    if method not in MUTATING_METHODS:
        return None
    for value in fields.get("content-type", ()):
        media = value.split(";", 1)[0].strip().lower()
        if media != _JSON_TYPE:
            return _refuse(
                f"{method} needs Content-Type: application/json or none "
                f"(got {_show(value)}); with curl, add -H 'Content-Type: application/json'"
            )
    return None


def _host_and_origin(
    fields: dict[str, list[str]], *, listen_host: str, allowed_hosts: Collection[str]
) -> Refusal | None:
    hosts = fields.get("host", [])
    if len(hosts) > 1:
        return _refuse("more than one Host header")
    host = hosts[0] if hosts else ""
    if host and not _host_allowed(host, listen_host, tuple(allowed_hosts)):
        return _refuse(
            f"Host {_show(host)} is not a loopback name or this server's address "
            f"(DNS rebinding?); add the name to {ALLOWED_HOSTS_ENV} if it is yours"
        )
    for origin in fields.get("origin", ()):
        if not host or not _same_origin(origin, host):
            return _refuse(f"cross-origin requests are refused (Origin {_show(origin)})")
    return None


@functools.lru_cache(maxsize=512)  # a server sees a handful of Host values; parsing them is slow
def _host_allowed(host: str, listen_host: str, allowed: tuple[str, ...]) -> bool:
    name = _host_name(host)
    if name is None:
        return False  # malformed: userinfo, spaces, a non-numeric port
    if _is_loopback(name):
        return True
    listen = listen_host.strip().lower()
    ip = _ip(name)
    if listen in _WILDCARD_LISTEN and ip is not None:
        return True  # an IP literal cannot be rebound: the page came from that address
    if ip is not None and ip == _ip(listen.strip("[]")):
        return True
    if name == listen.rstrip("."):
        return True
    return any(_name_matches(name, pattern) for pattern in allowed)


@functools.lru_cache(maxsize=8)
def _listens_on_loopback(listen_host: str) -> bool:
    return _is_loopback(listen_host.strip().lower().strip("[]"))


def _host_name(host: str) -> str | None:
    """The lower-cased name or address of a ``Host`` value, without port; None if malformed."""
    value = host.strip().lower()
    if value.startswith("["):  # an IPv6 literal: [::1] or [::1]:8474
        name, bracket, rest = value[1:].partition("]")
        if not bracket or _ip(name) is None:
            return None
    else:
        name, _, port = value.partition(":")
        rest = f":{port}" if port else ""
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    name = name.removesuffix(".")
    if not name or any(c.isspace() or c in "@/\\?#%" for c in name):
        return None
    return name


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _is_loopback(name: str) -> bool:
    # Browsers resolve localhost and *.localhost to loopback themselves (RFC 6761),
    # so a page cannot rebind them.
    if name == "localhost" or name.endswith(".localhost"):
        return True
    ip = _ip(name)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip is not None and ip.is_loopback


def _name_matches(name: str, pattern: str) -> bool:
    pattern = pattern.strip().lower().removesuffix(".")
    if pattern == "*":
        return True
    if pattern.startswith("."):
        return name == pattern[1:] or name.endswith(pattern)
    return name == pattern


def _same_origin(origin: str, host: str) -> bool:
    """True when ``Origin`` is ``http://`` + ``Host`` (an omitted port being 80 on both)."""
    try:
        theirs, ours = urlsplit(origin.strip().lower()), urlsplit(f"http://{host.lower()}")
        their_port, our_port = theirs.port or _HTTP_PORT, ours.port or _HTTP_PORT
    except ValueError:
        return False
    if theirs.scheme != "http" or not theirs.hostname or theirs.path not in ("", "/"):
        return False  # the APIs serve plain http: an https or file origin is another page
    return (theirs.hostname, their_port) == (ours.hostname, our_port)


def _show(value: str) -> str:
    """A header value as a refusal may quote it: printable ASCII, clipped."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in value)
    return clean if len(clean) <= _SHOWN else clean[: _SHOWN - 1] + "…"


def _refuse(message: str) -> Refusal:
    return Refusal(status=FORBIDDEN, message=message)
