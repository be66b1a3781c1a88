"""Browser-shaped requests for the servers the stack ships (faultday_wire.webguard), over real HTTP.

Each :class:`Attack` changes one thing in an otherwise valid JSON call (the
user agent, an ``Origin``, the content type, the ``Host``), so a 403 from it
proves that one rule; :func:`assert_refused` sends it and checks the answer.
The servers are expected to listen on 127.0.0.1, as the local stack runs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx

from faultday_wire.webguard import ALLOWED_HOSTS_ENV, MUTATING_METHODS

CHROME = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Attack:
    """One way a web page reaches the API, and a word the refusal must carry."""

    name: str
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = "application/json"
    says: str = ""
    mutating_only: bool = False  # the content-type rule concerns POST/PUT/PATCH/DELETE only


ATTACKS = (
    Attack("browser user agent", {"User-Agent": CHROME}, says="browser"),
    Attack("foreign origin", {"Origin": "http://evil.example"}, says="cross-origin"),
    Attack("null origin", {"Origin": "null"}, says="cross-origin"),
    Attack(
        "text/plain body (a simple request)",
        content_type="text/plain;charset=UTF-8",
        says="application/json",
        mutating_only=True,
    ),
    Attack(
        "form body (a simple request)",
        content_type="application/x-www-form-urlencoded",
        says="application/json",
        mutating_only=True,
    ),
    Attack("rebound DNS name", {"Host": "evil.example"}, says=ALLOWED_HOSTS_ENV),
)
HOST_ATTACK = ATTACKS[-1]
IDS = [a.name for a in ATTACKS]


def attacks_for(method: str) -> list[Attack]:
    """The attacks that apply to ``method``."""
    mutating = method.upper() in MUTATING_METHODS
    return [a for a in ATTACKS if mutating or not a.mutating_only]


def send(
    url: str, method: str, body: object | None, attack: Attack | None = None
) -> httpx.Response:
    """``body`` as JSON (none when None), shaped by ``attack`` when one is given."""
    headers: dict[str, str] = {}
    content = None if body is None else json.dumps(body).encode()
    if content is not None:
        headers["Content-Type"] = "application/json"
    if attack is not None:
        if attack.content_type is None or content is None:
            headers.pop("Content-Type", None)
        if content is not None and attack.content_type is not None:
            headers["Content-Type"] = attack.content_type
        headers.update(attack.headers)
    return httpx.request(method, url, content=content, headers=headers, timeout=TIMEOUT)


def assert_refused(url: str, method: str, body: object | None, attack: Attack) -> str:
    """Send the attack, assert a 403 that names the rule; return the answer's text."""
    resp = send(url, method, body, attack)
    assert resp.status_code == 403, (attack.name, resp.status_code, resp.text[:300])
    assert attack.says.lower() in resp.text.lower(), (attack.name, resp.text[:300])
    return resp.text
