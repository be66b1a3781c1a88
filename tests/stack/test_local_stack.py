"""The whole local profile: every component up, every edge through the fault proxy."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from tests.stack.conftest import REPO, marked_processes

from faultday.core.profile import load_profile
from faultday.core.targets import TargetKind
from faultday.stack.stack import Stack

MakeStack = Callable[..., Stack]


def test_local_stack_up_edges_through_the_proxy_and_down(make_stack: MakeStack) -> None:
    s = make_stack(load_profile("local", base_dir=REPO), policy="naive")
    s.up(timeout=90)
    info = s.describe()
    assert {c.name: c.health for c in info.components} == dict.fromkeys(
        [
            "redis",
            "triton",
            "qdrant",
            "llm-primary",
            "llm-backup",
            "llm-canary",
            "proxy",
            "collector",
            "tools",
            "agent",
        ],
        "ready",
    )
    assert info.policy == "naive"
    assert "--policy naive" in (s.run_dir / "logs" / "agent.log").read_text().splitlines()[0]
    edge = s.target("agent->qdrant")
    assert edge.kind == TargetKind.EDGE
    assert edge.upstream == s.endpoints()["qdrant"].removeprefix("http://")
    proxies = httpx.get(f"{edge.proxy_api}/proxies", timeout=5).json()
    assert proxies[edge.proxy_name]["listen"] == edge.url
    assert set(proxies) == {e.proxy_name for e in info.edges}
    # The agent dials the proxy, not qdrant: the proxy's listen port is in its command line.
    assert f"--qdrant http://{edge.url}" in (s.run_dir / "logs" / "agent.log").read_text()

    chat = {"session_id": "t1", "message": "what does xid 79 mean"}
    r = httpx.post(f"{s.endpoints()['agent']}/v1/chat", json=chat, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["degraded"] is False
    # Cut the edge at the proxy: retrieval through it fails; the naive policy has no
    # fallback, so the request fails naming the vector store.
    httpx.post(f"{edge.proxy_api}/proxies/{edge.proxy_name}", json={"enabled": False}, timeout=5)
    r = httpx.post(
        f"{s.endpoints()['agent']}/v1/chat", json={**chat, "session_id": "t2"}, timeout=60
    )
    assert r.status_code == 503, r.text
    assert "vector" in r.json()["error"]

    t0 = time.monotonic()
    s.down()
    assert time.monotonic() - t0 < 10
    assert marked_processes(s.run_dir) == []
