"""The tool server refuses what a web page could send (issue 16.2); MCP clients still pass."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.tools.test_server import Ctx, call
from tests.webguard_http import ATTACKS, IDS, Attack, assert_refused, attacks_for

from faultday.core.targets import Target, TargetKind
from faultday.injectors.tools import ToolOverload
from faultday_refstack.tools.capacity import ToolFault
from faultday_refstack.tools.server import TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from procs import Procs

# Every field of a fault set, so an accepted PUT would show in GET /admin/faults.
FAULT = ToolFault(tools=list(TOOLS), concurrency=0, queue=0, latency_s=1.0, error_rate=1.0)
SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "send_message",
        "arguments": {"to": "a@b", "subject": "s", "body": "x", "idempotency_key": "web-0001"},
    },
}


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    p = Procs(tmp_path_factory.mktemp("tools-webguard"))
    try:
        yield p.tools()[1]
    finally:
        p.close()


def admin_state(tools: str) -> tuple[dict[str, object], int]:
    faults = httpx.get(f"{tools}/admin/faults", timeout=5).json()["faults"]
    return faults, httpx.get(f"{tools}/admin/outbox", timeout=5).json()["count"]


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_admin_refuses_every_browser_shape(tools: str, attack: Attack) -> None:
    body = FAULT.model_dump()
    assert_refused(f"{tools}/admin/faults/web", "PUT", body, attack)
    bodiless = attack in attacks_for("GET") and attack.content_type == "application/json"
    for method, path in (("DELETE", "/admin/faults/web"), ("GET", "/admin/outbox")):
        if bodiless:
            assert_refused(f"{tools}{path}", method, None, attack)
    assert admin_state(tools) == ({}, 0)


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_mcp_endpoint_refuses_every_browser_shape(tools: str, attack: Attack) -> None:
    """A page cannot call a tool (send_message writes the outbox) through /mcp either."""
    headers_ok = {"Accept": "application/json, text/event-stream"}
    shaped = Attack(attack.name, {**headers_ok, **attack.headers}, attack.content_type, attack.says)
    assert_refused(f"{tools}/mcp", "POST", SEND, shaped)
    assert admin_state(tools) == ({}, 0)


def test_mcp_client_and_injectors_pass(tools: str) -> None:
    res = call(tools, "query_report", {"sql": "SELECT count(*) FROM customers"})
    assert res.structured_content == {"columns": ["count(*)"], "rows": [[8]]}
    target = Target(name="tools", kind=TargetKind.COMPONENT, component_type="tools", url=tools)
    inj = ToolOverload()
    params = inj.parse({"concurrency": 0, "queue": 0})
    rev = inj.prepare(Ctx(), target, params, fault="f1")  # type: ignore[arg-type]
    inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
    (fault_id,) = admin_state(tools)[0]
    assert fault_id.startswith("f1")
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]
    assert admin_state(tools)[0] == {}
    # curl's shapes: a PUT with a bare body and no content type, a bodiless DELETE.
    raw = FAULT.model_dump_json().encode()
    assert httpx.put(f"{tools}/admin/faults/curl", content=raw, timeout=5).status_code == 200
    assert httpx.delete(f"{tools}/admin/faults/curl", timeout=5).json()["deleted"] is True
