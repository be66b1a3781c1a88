"""The MCP tool server as a process: tools, read-only DB, idempotent outbox, capacity faults."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from procs import Procs

from faultday.core.targets import Target, TargetKind
from faultday.injectors.tools import ToolOverload, ToolTimeout


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[str]:
    p = Procs(tmp_path)
    try:
        yield p.tools("--queue-timeout", "0.5")[1]
    finally:
        p.close()


def call(url: str, name: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with Client(f"{url}/mcp", mode="2026-07-28") as c:
            return await c.call_tool(name, args)

    try:
        return asyncio.run(go())
    except BaseExceptionGroup as group:  # the SDK's task group wraps the MCP error
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise leaf from None


def test_tools_answer_and_db_is_read_only(tools: str) -> None:
    res = call(tools, "query_report", {"sql": "SELECT count(*) FROM customers"})
    assert res.structured_content == {"columns": ["count(*)"], "rows": [[8]]}
    hits = call(tools, "search_docs", {"query": "refund"}).structured_content["results"]
    assert hits[0]["id"] == "policy-refunds"
    with pytest.raises(MCPError) as exc:
        call(tools, "query_report", {"sql": "DELETE FROM customers"})
    assert exc.value.data["retryable"] is False
    assert call(tools, "search_docs", {"query": ""}).is_error  # schema: min_length 1


def test_send_message_is_idempotent(tools: str) -> None:
    args = {"to": "a@b", "subject": "s", "body": "x", "idempotency_key": "key-00000001"}
    first = call(tools, "send_message", args).structured_content
    again = call(tools, "send_message", args).structured_content
    assert first["duplicate"] is False and again == {**first, "duplicate": True}
    assert httpx.get(f"{tools}/admin/outbox", timeout=5).json()["count"] == 1


class Ctx:
    run_dir = Path()
    live = True


def test_tool_overload_injector_then_revert(tools: str) -> None:
    target = Target(name="tools", kind=TargetKind.COMPONENT, component_type="tools", url=tools)
    inj = ToolOverload()
    params = inj.parse({"concurrency": 0, "queue": 0})
    rev = inj.prepare(Ctx(), target, params, fault="f1")  # type: ignore[arg-type]
    inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
    with pytest.raises(MCPError) as exc:
        call(tools, "search_docs", {"query": "redis"})
    assert exc.value.data["retryable"] is True and exc.value.data["retry_after"] >= 1
    metrics = httpx.get(f"{tools}/metrics", timeout=5).text
    assert 'faultday_tools_calls_total{result="overloaded",tool="search_docs"} 1.0' in metrics
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]  # idempotent
    assert call(tools, "search_docs", {"query": "redis"}).is_error is False


def test_tool_timeout_injector_adds_latency(tools: str) -> None:
    target = Target(name="tools", kind=TargetKind.COMPONENT, component_type="tools", url=tools)
    inj = ToolTimeout()
    params = inj.parse({"latency": "700ms", "tools": ["query_report"]})
    rev = inj.prepare(Ctx(), target, params, fault="slow")  # type: ignore[arg-type]
    inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
    t0 = time.monotonic()
    call(tools, "query_report", {"sql": "SELECT 1"})
    assert time.monotonic() - t0 >= 0.7
    inj.revert(Ctx(), rev)  # type: ignore[arg-type]
    assert httpx.get(f"{tools}/admin/faults", timeout=5).json()["faults"] == {}
