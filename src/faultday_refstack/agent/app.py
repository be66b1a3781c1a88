"""The FastAPI app: chat, tasks, health, metrics; admission control at the gateway."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from opentelemetry.trace import SpanKind, Status, StatusCode, get_current_span
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from faultday_refstack.agent.config import Text
from faultday_refstack.agent.resilience import Deadline
from faultday_refstack.agent.runtime import Runtime, Unavailable
from faultday_refstack.agent.tasks import Task, TaskEngine, TaskRequest
from faultday_refstack.otel import extract
from faultday_wire.admin import CanaryShare
from faultday_wire.answers import ANSWER_HEADER, CANNED
from faultday_wire.policy import Admission
from faultday_wire.webguard import WebGuard

log = logging.getLogger(__name__)

TRACE_HEADER = "x-faultday-trace-id"
DEGRADED_HEADER = "x-faultday-degraded"


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: Text = Field(min_length=1, max_length=200)
    message: Text = Field(min_length=1, max_length=8000)
    rag: bool = True


TaskId = Annotated[str, Path(max_length=64)]  # ids are 16 hex digits, a subtask's "-k" after


class AsciiJSON(JSONResponse):
    """JSON with every non-ASCII character escaped."""

    # An unpaired surrogate a client sent, quoted by an error, is written as \ud800: the
    # UTF-8 encoding of JSONResponse fails on it.
    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _shown(value: Any) -> Any:
    """An invalid input as an error quotes it: short, finite, never a whole body echoed back."""
    if isinstance(value, dict | list):
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        return f"<int of {value.bit_length()} bits>"
    return value


def _error_view(error: Mapping[str, Any]) -> dict[str, Any]:
    view = {k: error[k] for k in ("type", "loc", "msg") if k in error}
    if "input" in error:
        view["input"] = _shown(error["input"])
    if "ctx" in error:
        view["ctx"] = {
            k: _shown(v) if isinstance(v, int | float | str) else str(v)
            for k, v in error["ctx"].items()
        }
    return view


async def invalid_request(request: Request, exc: Exception) -> Response:
    """FastAPI's 422, each invalid input quoted safely."""
    # The default handler echoes every input whole: NaN, Infinity or an unpaired surrogate
    # there made the error response itself fail, a 500.
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return AsciiJSON({"detail": [_error_view(e) for e in errors]}, status_code=422)


class Gate:
    """Admission control: a cap on requests in flight and a bounded queue before it."""

    def __init__(self, cfg: Admission) -> None:
        self.cfg = cfg
        self.in_flight = 0
        self.waiting = 0
        self._cond = asyncio.Condition()

    async def enter(self) -> bool:
        async with self._cond:
            if self.in_flight < self.cfg.max_in_flight:
                self.in_flight += 1
                return True
            if self.waiting >= self.cfg.max_queue:
                return False
            self.waiting += 1
            try:
                async with asyncio.timeout(self.cfg.queue_timeout):
                    await self._cond.wait_for(lambda: self.in_flight < self.cfg.max_in_flight)
            except TimeoutError:
                return False
            finally:
                self.waiting -= 1
            self.in_flight += 1
            return True

    async def leave(self) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify(1)


def build_app(  # noqa: PLR0915 - every route of the runtime in one place
    rt: Runtime, *, listen_host: str, allowed_hosts: tuple[str, ...] = ()
) -> FastAPI:
    """The runtime's API, listening on ``listen_host``, behind the browser guard."""
    engine = TaskEngine(rt)
    gate = Gate(rt.policy.admission)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        rt.sdks.preload()
        try:
            yield
        finally:
            await engine.stop()
            await rt.close()

    app = FastAPI(title="faultday agent runtime", lifespan=lifespan)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.state.runtime = rt
    app.state.engine = engine

    @app.middleware("http")
    async def trace_and_admit(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        route = request.url.path
        gated = route.startswith("/v1/")
        label = _route_label(route)
        t0 = time.monotonic()
        with rt.tracer.start_as_current_span(
            f"{request.method} {label}",
            # A child of the caller's traceparent (the load sends one per request).
            context=extract(request.scope["headers"]),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": request.method, "http.route": label},
        ) as span:
            trace_id = f"{span.get_span_context().trace_id:032x}"
            request.state.trace_id = trace_id
            if gated and not await gate.enter():
                span.set_attributes(
                    {"http.response.status_code": 429, "faultday.admission": "rejected"}
                )
                rt.metrics.rejected.inc()
                rt.metrics.requests.labels(label, "429").inc()
                ra = max(1, round(rt.policy.admission.retry_after))
                return JSONResponse(
                    {"error": "too many requests in flight", "trace_id": trace_id},
                    status_code=429,
                    headers={"Retry-After": str(ra), TRACE_HEADER: trace_id},
                )
            rt.metrics.in_flight.set(gate.in_flight)
            rt.metrics.queue_depth.labels("gateway").set(gate.waiting)
            try:
                if gated:
                    # Only in the first seconds after start: the wait must not count
                    # against a dependency's timeout or breaker, so it happens here.
                    await rt.sdks.ready()
                response = await call_next(request)
            finally:
                if gated:
                    await gate.leave()
                    rt.metrics.in_flight.set(gate.in_flight)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status_code}"))
        response.headers[TRACE_HEADER] = trace_id
        rt.metrics.requests.labels(label, str(response.status_code)).inc()
        rt.metrics.request_seconds.labels(label).observe(time.monotonic() - t0)
        return response

    @app.get("/health")
    async def health() -> JSONResponse:
        # Liveness of the runtime itself: a dependency outage degrades, it does not kill us.
        # 503 until the client SDKs are imported (~1-2 s after it listens): until then
        # every request would wait for them, so it is not ready to take load.
        loaded = rt.sdks.loaded
        body = {
            "status": "ok" if loaded else "starting",
            "policy": rt.policy_name,
            "breakers": {
                d: rt.res.breaker_state(d)
                for d in ("llm-primary", "llm-backup", "redis", "embedder", "vector", "tools")
            }
            | ({"llm-canary": rt.res.breaker_state("llm-canary")} if rt.canary else {}),
            "resumed_tasks": engine.resumed,
            "client_sdks_loaded": loaded,
        }
        return JSONResponse(body, status_code=200 if loaded else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        try:
            depth = await asyncio.wait_for(engine.queue_depth(), timeout=0.5)
            rt.metrics.queue_depth.labels("tasks").set(depth)
        except Exception as exc:  # noqa: BLE001 - metrics must answer while Redis is down
            log.debug("queue depth unavailable: %s", exc)
        return Response(generate_latest(rt.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/admin/canary")
    async def canary_state() -> dict[str, Any]:
        return _canary_view(rt)

    @app.post("/admin/canary")
    async def set_canary(body: CanaryShare) -> dict[str, Any]:
        # A rollout (faultday's model_rollout) sets the share; 0 stops the canary.
        if rt.canary is None:
            raise HTTPException(409, "no canary configured (models.canary and --llm-canary)")
        previous = rt.set_canary_share(body.share)
        return _canary_view(rt) | {"previous": previous}

    @app.post("/v1/chat")
    async def chat(body: ChatRequest, request: Request) -> JSONResponse:
        trace_id = request.state.trace_id
        deadline = Deadline(rt.policy.timeouts.request)
        try:
            # A hard stop a little past the deadline, in case a client ignores its timeout.
            async with asyncio.timeout(rt.policy.timeouts.request + 1.0):
                result = await rt.chat(
                    session_id=body.session_id,
                    message=body.message,
                    rag=body.rag,
                    deadline=deadline,
                    request_id=trace_id,
                )
        except Unavailable as exc:
            rt.metrics.degraded.labels("unavailable").inc()
            get_current_span().set_attributes(
                {"faultday.degraded": True, "faultday.degraded_reasons": ["unavailable"]}
            )
            return _unavailable(str(exc), exc.retry_after, trace_id)
        except TimeoutError:
            return _unavailable("request deadline exceeded", 1.0, trace_id, status=504)
        result["trace_id"] = trace_id
        return JSONResponse(
            result,
            headers={
                DEGRADED_HEADER: "true" if result["degraded"] else "false",
                f"{DEGRADED_HEADER}-reasons": ",".join(result["degraded_reasons"]),
                ANSWER_HEADER: CANNED if result["canned"] else "model",
            },
        )

    @app.post("/v1/tasks", status_code=202)
    async def submit(body: TaskRequest, request: Request) -> JSONResponse:
        trace_id = request.state.trace_id
        try:
            task, created = await engine.submit(body, trace_id=trace_id)
        except KeyError as exc:
            raise HTTPException(422, f"unknown agent {body.agent!r}") from exc
        except Unavailable as exc:
            return _unavailable(str(exc), exc.retry_after, trace_id)
        return JSONResponse(_task_view(task, trace_id), status_code=202 if created else 200)

    @app.get("/v1/tasks/{task_id}")
    async def get_task(task_id: TaskId, request: Request) -> JSONResponse:
        trace_id = request.state.trace_id
        try:
            task = await engine.get(task_id)
        except Exception as exc:  # noqa: BLE001 - DependencyError from the store
            return _unavailable(f"task store: {exc}", 1.0, trace_id)
        if task is None:
            raise HTTPException(404, f"no task {task_id!r}")
        return JSONResponse(_task_view(task, trace_id))

    # Added last, so outermost (faultday_wire.webguard): a refused request takes no admission
    # slot, opens no span and reaches no route.
    app.add_middleware(WebGuard, listen_host=listen_host, allowed_hosts=allowed_hosts)
    return app


def _canary_view(rt: Runtime) -> dict[str, Any]:
    if rt.canary is None:
        return {"configured": False, "share": 0.0, "model": None}
    return {
        "configured": True,
        "share": rt.canary.share,
        "model": rt.canary.cfg.model,
        "key": str(rt.canary.cfg.key),
    }


def _task_view(task: Task, trace_id: str) -> dict[str, Any]:
    view = task.model_dump(mode="json")
    view["trace_id"] = trace_id
    view["task_trace_id"] = task.trace_id
    view["degraded"] = bool(task.degraded_reasons)
    return view


def _unavailable(msg: str, retry_after: float, trace_id: str, status: int = 503) -> JSONResponse:
    return JSONResponse(
        {"error": msg, "trace_id": trace_id, "degraded": True},
        status_code=status,
        headers={"Retry-After": str(max(1, round(retry_after))), TRACE_HEADER: trace_id},
    )


def _route_label(path: str) -> str:
    if path.startswith("/v1/tasks/"):
        return "/v1/tasks/{id}"
    return path if path in ("/v1/chat", "/v1/tasks", "/health", "/metrics") else "other"
