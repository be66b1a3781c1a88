"""Clients of the runtime's dependencies; each maps its failures to Retryable / Permanent.

Addresses are pure configuration (CLI/env), so the stack supervisor can route
every edge through the fault proxy. The clients never retry on their own: the
policy in ``resilience.py`` is the only place that decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import redis.asyncio as aioredis
from opentelemetry.trace import get_current_span
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from faultday_refstack.agent.resilience import Permanent, Retryable
from faultday_refstack.otel import inject

if TYPE_CHECKING:
    from mcp import Client as McpClient

log = logging.getLogger(__name__)

MCP_PROTOCOL = "2026-07-28"  # pinned: no discovery round-trip per call

# The MCP SDK builds hundreds of pydantic models at import (~0.8 s of CPU, a third
# of the runtime's start). It is imported in a thread once the app serves
# (``Sdks.preload``): /health answers 503 meanwhile, and a request that needs it
# waits without blocking the event loop.
SDK_MODULES = ("mcp",)


class Sdks:
    """Imports the client SDKs once, in a worker thread, never two imports at a time.

    One lock for both the preload and the requests: two threads importing the same
    packages at once can hit Python's import deadlock detection (``_DeadlockError``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = threading.Event()

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    def load(self) -> None:
        with self._lock:
            if self._loaded.is_set():
                return
            t0 = time.monotonic()
            for name in SDK_MODULES:
                importlib.import_module(name)
            self._loaded.set()
            log.info("client SDKs imported in %.2fs", time.monotonic() - t0)

    def preload(self) -> threading.Thread:
        """Start importing them in the background (a daemon thread: never holds up exit)."""
        t = threading.Thread(target=self._preload, name="sdk-preload", daemon=True)
        t.start()
        return t

    def _preload(self) -> None:
        try:
            self.load()
        except Exception:  # the first request that needs them raises it again, to its caller
            log.exception("importing the client SDKs failed")

    async def ready(self) -> None:
        """Wait for the SDKs without blocking the event loop (instant once loaded)."""
        if not self._loaded.is_set():
            await asyncio.to_thread(self.load)


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    raw = headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _status_error(status: int, message: str, retry_after: float | None = None) -> Exception:
    if status == 429 or status >= 500:
        return Retryable(f"HTTP {status}: {message}", retry_after=retry_after)
    return Permanent(f"HTTP {status}: {message}")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LlmReply:
    text: str
    model: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    completion_tokens: int = 0  # as the LLM's usage reports it; 0 when it reports none
    canned: bool = False  # the fallback text, no model's answer


class Llm:
    """An OpenAI-compatible endpoint (vLLM or the simulator): ``POST /v1/chat/completions``.

    Plain httpx, not the ``openai`` SDK: the runtime needs one non-streaming call,
    and the SDK's ~0.5 s of import-time model building sat on every start.
    """

    def __init__(self, base_url: str, model: str, *, max_tokens: int) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        # vLLM started with --api-key wants a bearer token; the simulator ignores it.
        self.http = httpx.AsyncClient(headers={"Authorization": "Bearer faultday"})

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        timeout: float,
        tools: list[dict[str, Any]] | None = None,
    ) -> LlmReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
        }
        if tools:
            body["tools"] = tools
        try:
            resp = await self.http.post(self.url, json=body, timeout=timeout, headers=inject())
        except httpx.HTTPError as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc
        span = get_current_span()  # the attempt's CLIENT span (resilience.py)
        span.set_attribute("http.response.status_code", resp.status_code)
        if resp.status_code >= 400:
            raise _status_error(resp.status_code, _error_message(resp), _retry_after(resp.headers))
        try:
            data = resp.json()
            choices = data.get("choices") or []
        except (ValueError, AttributeError) as exc:
            raise Permanent(f"llm: unexpected response: {resp.text[:200]}") from exc
        if not choices or not isinstance(choices[0], dict):
            raise Retryable("empty completion (no choices)")
        msg = choices[0].get("message") or {}
        usage = data.get("usage") or {}
        reply = LlmReply(
            text=msg.get("content") or "",
            model=data.get("model") or self.model,
            tool_calls=_tool_calls(msg.get("tool_calls") or []),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )
        span.set_attributes(
            {
                "gen_ai.response.model": reply.model,
                "gen_ai.usage.completion_tokens": reply.completion_tokens,
                "gen_ai.usage.prompt_tokens": int(usage.get("prompt_tokens") or 0),
            }
        )
        return reply

    async def close(self) -> None:
        await self.http.aclose()


def _error_message(resp: httpx.Response) -> str:
    """The OpenAI error body's message (``{"error": {"message": ...}}``), else the text."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        err = resp.json().get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    return resp.text[:300]


def _tool_calls(raw: list[Any]) -> list[ToolCall]:
    calls = []
    for tc in raw:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            continue
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (json.JSONDecodeError, TypeError):
            args = {}
        calls.append(
            ToolCall(
                id=str(tc.get("id") or ""),
                name=str(fn.get("name") or ""),
                args=args if isinstance(args, dict) else {},
            )
        )
    return calls


class Embedder:
    """Triton over the KServe v2 HTTP protocol: one text in, one vector out."""

    def __init__(self, base_url: str, *, model: str, input_name: str, output_name: str) -> None:
        self.url = f"{base_url.rstrip('/')}/v2/models/{model}/infer"
        self.input_name = input_name
        self.output_name = output_name
        self.http = httpx.AsyncClient()

    async def embed(self, text: str, *, timeout: float) -> list[float]:
        body = {
            "inputs": [
                {"name": self.input_name, "shape": [1, 1], "datatype": "BYTES", "data": [text]}
            ],
            "outputs": [{"name": self.output_name}],
        }
        try:
            resp = await self.http.post(self.url, json=body, timeout=timeout, headers=inject())
        except httpx.HTTPError as exc:
            raise Retryable(f"embedder: {type(exc).__name__}: {exc}") from exc
        get_current_span().set_attribute("http.response.status_code", resp.status_code)
        if resp.status_code != 200:
            raise _status_error(resp.status_code, resp.text[:200], _retry_after(resp.headers))
        try:
            outputs = resp.json()["outputs"]
            out = next(o for o in outputs if o.get("name") == self.output_name)
            return [float(x) for x in out["data"]]
        except (KeyError, StopIteration, ValueError, TypeError) as exc:
            raise Permanent(f"embedder: unexpected response: {resp.text[:200]}") from exc

    async def close(self) -> None:
        await self.http.aclose()


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    text: str


class Vector:
    """A Qdrant REST endpoint (the real server, or faultday's front over qdrant-edge).

    Plain httpx for its one call (``POST /collections/{name}/points/query``), not
    ``qdrant-client``: that builds ~1 s of pydantic models at import, at every start.
    """

    def __init__(self, base_url: str, *, collection: str, top_k: int) -> None:
        self.collection = collection
        self.top_k = top_k
        self.url = f"{base_url.rstrip('/')}/collections/{collection}/points/query"
        self.http = httpx.AsyncClient()

    async def search(self, vector: list[float], *, timeout: float) -> list[Hit]:
        body = {"query": vector, "limit": self.top_k, "with_payload": True}
        try:
            resp = await self.http.post(
                self.url,
                json=body,
                # Qdrant's own server-side limit, in whole seconds, as qdrant-client sends it.
                params={"timeout": max(1, int(timeout + 0.999))},
                timeout=timeout,
                headers=inject(),
            )
        except httpx.HTTPError as exc:
            raise Retryable(f"vector: {type(exc).__name__}: {exc}") from exc
        span = get_current_span()  # the attempt's CLIENT span (resilience.py)
        span.set_attribute("http.response.status_code", resp.status_code)
        if not 200 <= resp.status_code < 300:
            raise _status_error(resp.status_code, resp.text[:200])
        try:
            points = resp.json()["result"]["points"]
            hits = []
            for p in points:
                payload = p.get("payload") or {}
                text = str(payload.get("text") or payload.get("body") or payload.get("title") or "")
                hits.append(Hit(id=str(p["id"]), score=float(p["score"]), text=text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise Retryable(f"vector: unexpected response: {resp.text[:200]}") from exc
        span.set_attribute("retrieval.hits", len(hits))
        return hits

    async def close(self) -> None:
        await self.http.aclose()


class Store:
    """Redis: sessions, task checkpoints, the task queue and the audit stream."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self.r = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # the policy retries, not the client
            decode_responses=True,
        )

    async def run(self, coro: Any) -> Any:
        try:
            return await coro
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise Retryable(f"redis: {type(exc).__name__}: {exc}") from exc
        except RedisError as exc:
            raise Permanent(f"redis: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        await self.r.aclose()


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@dataclass(frozen=True, slots=True)
class ToolResult:
    ok: bool
    data: dict[str, Any]
    text: str


class Tools:
    """The MCP tool server over streamable HTTP; one short session per call."""

    def __init__(self, url: str, *, sdks: Sdks | None = None) -> None:
        self.url = url.rstrip("/") + "/mcp" if not url.rstrip("/").endswith("/mcp") else url
        self.sdks = sdks or Sdks()

    @contextlib.asynccontextmanager
    async def _session(self, timeout: float) -> AsyncIterator[McpClient]:
        """One short MCP session whose HTTP requests carry the current span's traceparent.

        The SDK also puts the trace context in each request's ``_meta``; the header is what
        a proxy on the edge (and the tool server's own span) reads.
        """
        # Start-up time: the MCP SDK (~0.8 s) loads on a thread once the app serves (SDK_MODULES).
        from mcp import Client  # noqa: PLC0415
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415
        from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: PLC0415

        async with create_mcp_http_client(headers=inject()) as http:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(transport, mode=MCP_PROTOCOL, read_timeout_seconds=timeout) as c:
                yield c

    async def schemas(self, *, timeout: float) -> dict[str, dict[str, Any]]:
        """Each tool's JSON Schema, as the server lists it."""
        await self.sdks.ready()
        try:
            async with self._session(timeout) as c:
                listed = await c.list_tools()
        except Exception as exc:
            raise Retryable(f"tools/list: {type(_leaf(exc)).__name__}: {_leaf(exc)}") from exc
        return {t.name: dict(t.input_schema) for t in listed.tools}

    async def call(
        self, name: str, args: dict[str, Any], *, timeout: float, meta: dict[str, str]
    ) -> ToolResult:
        await self.sdks.ready()
        # Start-up time: the MCP SDK (~0.8 s) loads on a thread once the app serves (SDK_MODULES).
        from mcp.shared.exceptions import MCPError  # noqa: PLC0415

        get_current_span().set_attribute("gen_ai.tool.name", name)
        try:
            async with self._session(timeout) as c:
                res = await c.call_tool(name, args, meta=meta)  # type: ignore[arg-type]
        except Exception as exc:
            leaf = _leaf(exc)
            if isinstance(leaf, MCPError):
                data = leaf.data if isinstance(leaf.data, dict) else {}
                if data.get("retryable"):
                    ra = data.get("retry_after")
                    raise Retryable(
                        f"tool {name}: {leaf.message}",
                        retry_after=float(ra) if isinstance(ra, int | float) else None,
                    ) from exc
                raise Permanent(f"tool {name}: {leaf.message}") from exc
            raise Retryable(f"tool {name}: {type(leaf).__name__}: {leaf}") from exc
        text = "".join(getattr(c, "text", "") for c in res.content)
        if res.is_error:
            raise Permanent(f"tool {name}: {text[:300]}")
        data = res.structured_content if isinstance(res.structured_content, dict) else {}
        if not data and text:
            try:
                parsed = json.loads(text)
                data = parsed if isinstance(parsed, dict) else {"value": parsed}
            except json.JSONDecodeError:
                data = {"text": text}
        return ToolResult(ok=True, data=data, text=text)
