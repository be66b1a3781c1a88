"""The MCP tool server: four tools over streamable HTTP, each behind a capacity limit.

Admin routes (plain HTTP next to ``/mcp``) let the ``tool_overload`` and
``tool_timeout`` injectors cut capacity, add latency and set an error rate.
Faults are keyed by id, so a revert is a DELETE that is idempotent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from opentelemetry.trace import Tracer
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from faultday_refstack.otel import ServerSpans
from faultday_refstack.tools.capacity import Capacity, Overloaded, ToolFault
from faultday_refstack.tools.db import Store, build_report_db, open_readonly
from faultday_wire.webguard import WebGuard

log = logging.getLogger(__name__)

TOOLS = ("search_docs", "query_report", "send_message", "update_record")
# JSON-RPC server-error range (-32000..-32099): 429-like overload, injected error.
OVERLOADED = -32029
INJECTED = -32050
MAX_ROWS = 200
ROUTES = ("/mcp", "/health", "/metrics", "/admin/faults", "/admin/outbox")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ToolServerConfig:
    data_dir: Path
    concurrency: int = 8
    queue: int = 16
    queue_timeout: float = 1.0
    seed: int = 0


class ToolMetrics:
    """Prometheus metrics of one tool server (its own registry, no globals)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.calls = Counter(
            "faultday_tools_calls", "Tool calls by tool and result", ["tool", "result"], registry=r
        )
        self.latency = Histogram(
            "faultday_tools_call_seconds", "Tool call latency", ["tool"], registry=r
        )
        self.in_flight = Gauge("faultday_tools_in_flight", "Calls running", ["tool"], registry=r)
        self.queued = Gauge("faultday_tools_queue_depth", "Calls waiting", ["tool"], registry=r)
        self.capacity = Gauge(
            "faultday_tools_capacity", "Current concurrency cap", ["tool"], registry=r
        )
        self.outbox = Counter(
            "faultday_tools_outbox_messages", "Messages appended to the outbox", registry=r
        )
        self.duplicates = Counter(
            "faultday_tools_outbox_duplicates",
            "send_message calls deduplicated by idempotency key",
            registry=r,
        )
        self.faults = Gauge("faultday_tools_faults_active", "Injected faults active", registry=r)


class ToolServer:
    """Composition root of the tool server: stores, capacity, metrics and the MCP app."""

    def __init__(self, cfg: ToolServerConfig) -> None:
        self.cfg = cfg
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        report = cfg.data_dir / "report.sqlite"
        build_report_db(report)  # rebuilt each start: the committed SQL is the source of truth
        self.report = open_readonly(report)
        self.store = Store(cfg.data_dir / "store.sqlite")
        self.capacity = Capacity(
            list(TOOLS),
            concurrency=cfg.concurrency,
            queue=cfg.queue,
            queue_timeout=cfg.queue_timeout,
            seed=cfg.seed,
        )
        self.metrics = ToolMetrics()
        for t in TOOLS:
            self.metrics.capacity.labels(t).set(cfg.concurrency)
        self.mcp = MCPServer("faultday-tools", version="1", log_level="WARNING")
        self._register_tools()

    # -- capacity gate ------------------------------------------------------------------
    async def _gated(self, tool: str, fn: Callable[[], Awaitable[T]]) -> T:
        eff = self.capacity.effective(tool)
        lim = self.capacity.limiters[tool]
        start = time.monotonic()
        self.metrics.queued.labels(tool).set(lim.waiting + 1)
        try:
            async with lim.slot(eff):
                self.metrics.queued.labels(tool).set(lim.waiting)
                self.metrics.in_flight.labels(tool).set(lim.in_flight)
                if eff.latency_s:
                    await asyncio.sleep(eff.latency_s)
                self._maybe_fail(tool, eff.error_rate)
                result = await fn()
        except Overloaded as exc:
            self.metrics.calls.labels(tool, "overloaded").inc()
            raise MCPError(
                OVERLOADED,
                str(exc),
                {"retryable": True, "retry_after": exc.retry_after, "tool": tool},
            ) from exc
        except MCPError:
            self.metrics.calls.labels(tool, "error").inc()
            raise
        except (sqlite3.Error, ValueError) as exc:
            self.metrics.calls.labels(tool, "error").inc()
            raise MCPError(-32602, f"{tool}: {exc}", {"retryable": False, "tool": tool}) from exc
        finally:
            self.metrics.queued.labels(tool).set(lim.waiting)
            self.metrics.in_flight.labels(tool).set(max(lim.in_flight - 0, 0))
        self.metrics.calls.labels(tool, "ok").inc()
        self.metrics.latency.labels(tool).observe(time.monotonic() - start)
        return result

    def _maybe_fail(self, tool: str, rate: float) -> None:
        if self.capacity.roll_error(rate):
            raise MCPError(
                INJECTED,
                f"tool {tool!r} failed (injected error)",
                {"retryable": True, "retry_after": 1.0, "tool": tool},
            )

    # -- tools ----------------------------------------------------------------------------
    def _register_tools(self) -> None:
        m = self.mcp

        @m.tool(description="Full-text search over the documentation; returns the best matches.")
        async def search_docs(
            query: Annotated[str, Field(min_length=1, max_length=200)],
            limit: Annotated[int, Field(ge=1, le=10)] = 3,
        ) -> dict[str, Any]:
            async def run() -> dict[str, Any]:
                words = [w for w in "".join(c if c.isalnum() else " " for c in query).split()]
                if not words:
                    return {"results": []}
                match = " OR ".join(f'"{w}"' for w in words)
                rows = self.report.execute(
                    "SELECT doc_id, title, snippet(docs, 2, '[', ']', '…', 12) FROM docs"
                    " WHERE docs MATCH ? ORDER BY rank LIMIT ?",
                    (match, limit),
                ).fetchall()
                return {"results": [{"id": r[0], "title": r[1], "snippet": r[2]} for r in rows]}

            return await self._gated("search_docs", run)

        @m.tool(description="Run one read-only SQL query on the report database.")
        async def query_report(
            sql: Annotated[str, Field(min_length=1, max_length=2000)],
            max_rows: Annotated[int, Field(ge=1, le=MAX_ROWS)] = 50,
        ) -> dict[str, Any]:
            async def run() -> dict[str, Any]:
                cur = self.report.execute(sql)
                cols = [d[0] for d in cur.description or []]
                rows = cur.fetchmany(max_rows)
                return {"columns": cols, "rows": [list(r) for r in rows]}

            return await self._gated("query_report", run)

        @m.tool(description="Send a message (appended to the outbox once per idempotency key).")
        async def send_message(
            to: Annotated[str, Field(min_length=1, max_length=200)],
            subject: Annotated[str, Field(min_length=1, max_length=200)],
            body: Annotated[str, Field(max_length=10_000)],
            idempotency_key: Annotated[str, Field(min_length=8, max_length=200)],
            ctx: Context,
        ) -> dict[str, Any]:
            agent = _meta_str(ctx, "faultday/agent")

            async def run() -> dict[str, Any]:
                seq, dup = self.store.send(
                    key=idempotency_key, recipient=to, subject=subject, body=body, agent=agent
                )
                (self.metrics.duplicates if dup else self.metrics.outbox).inc()
                return {"message_id": f"msg-{seq}", "duplicate": dup}

            return await self._gated("send_message", run)

        @m.tool(description="Create or update one record (a write; privileged agents only).")
        async def update_record(
            record_id: Annotated[str, Field(min_length=1, max_length=100)],
            fields: dict[str, str],
        ) -> dict[str, Any]:
            async def run() -> dict[str, Any]:
                version = self.store.update(
                    record_id=record_id, fields_json=json.dumps(fields, sort_keys=True)
                )
                return {"record_id": record_id, "version": version}

            return await self._gated("update_record", run)

    # -- admin and ops routes ----------------------------------------------------------------
    def _routes(self) -> list[Route]:
        """The admin and ops routes, added to the MCP app beside its endpoint (typed
        Starlette routes: the SDK's ``custom_route`` decorator carries no types)."""

        async def health(_: Request) -> Response:
            return JSONResponse({"status": "ok", "tools": list(TOOLS)})

        async def metrics(_: Request) -> Response:
            self.metrics.faults.set(len(self.capacity.faults))
            return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

        async def list_faults(_: Request) -> Response:
            return JSONResponse(
                {
                    "faults": {k: v.model_dump() for k, v in self.capacity.faults.items()},
                    "effective": {t: _eff(self.capacity, t) for t in TOOLS},
                }
            )

        async def one_fault(request: Request) -> Response:
            fid = request.path_params["fault_id"]
            if request.method == "DELETE":
                existed = self.capacity.faults.pop(fid, None) is not None
                await self._apply()
                return JSONResponse({"deleted": existed, "id": fid})
            try:
                fault = ToolFault.model_validate_json(await request.body())
            except ValidationError as exc:
                return JSONResponse({"error": exc.errors(include_url=False)}, status_code=422)
            unknown = set(fault.tools or ()) - set(TOOLS)
            if unknown:
                return JSONResponse({"error": f"unknown tools {sorted(unknown)}"}, status_code=422)
            self.capacity.faults[fid] = fault
            await self._apply()
            return JSONResponse({"id": fid, "fault": fault.model_dump()})

        async def outbox(_: Request) -> Response:
            return JSONResponse(
                {"count": self.store.outbox_count(), "messages": self.store.outbox()}
            )

        return [
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/admin/faults", list_faults, methods=["GET"]),
            Route("/admin/faults/{fault_id}", one_fault, methods=["PUT", "DELETE"]),
            Route("/admin/outbox", outbox, methods=["GET"]),
        ]

    async def _apply(self) -> None:
        await self.capacity.refresh()
        for t in TOOLS:
            self.metrics.capacity.labels(t).set(self.capacity.limiters[t].cap)
        log.info("tool faults now: %s", sorted(self.capacity.faults))

    def app(
        self,
        *,
        listen_host: str,
        allowed_hosts: tuple[str, ...] = (),
        tracer: Tracer | None = None,
    ) -> Starlette:
        """The MCP endpoint and the admin routes, behind the browser guard (webguard).

        With a ``tracer``, each request is a SERVER span (faultday_refstack.otel).
        """
        # Stateless + JSON: each tools/call is one self-contained POST, so a proxy fault or
        # a restart of this server never strands a client on a dead MCP session.
        app = self.mcp.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # The guard checks Host and Origin on every route, /mcp included, and takes
            # FAULTDAY_ALLOWED_HOSTS; the SDK's own check (loopback names only, on /mcp
            # only) would refuse the service names peers use in a container.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        app.router.routes.extend(self._routes())
        if tracer is not None:
            # /mcp has the SDK's own span per message (tools/call NAME, gen_ai.tool.name),
            # parented on the trace context the client puts in _meta: __main__ hands the SDK
            # the provider. A second span per HTTP POST would only double it.
            app.add_middleware(ServerSpans, tracer=tracer, route_of=_route, skip=("/mcp",))
        app.add_middleware(WebGuard, listen_host=listen_host, allowed_hosts=allowed_hosts)
        return app


def _route(scope: dict[str, Any]) -> str:
    """The route template of a path (plain Starlette does not write the matched route)."""
    path = str(scope.get("path", ""))
    if path.startswith("/admin/faults/"):
        return "/admin/faults/{fault_id}"
    return path if path in ROUTES else "other"


def _eff(cap: Capacity, tool: str) -> dict[str, float | int]:
    e = cap.effective(tool)
    return {
        "concurrency": e.concurrency,
        "queue": e.queue,
        "latency_s": e.latency_s,
        "error_rate": e.error_rate,
    }


def _meta_str(ctx: Context, key: str) -> str:
    meta = getattr(ctx.request_context, "meta", None)
    value = None
    if meta is not None:
        value = meta.get(key) if isinstance(meta, dict) else getattr(meta, key, None)
    return value if isinstance(value, str) else ""
