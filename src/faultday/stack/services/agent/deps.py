"""Clients of the runtime's dependencies; each maps its failures to Retryable / Permanent.

Addresses are pure configuration (CLI/env), so the stack supervisor can route
every edge through the fault proxy. The clients never retry on their own: the
policy in ``resilience.py`` is the only place that decides.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from faultday.stack.services.agent.resilience import Permanent, Retryable

if TYPE_CHECKING:
    import openai
    from qdrant_client import AsyncQdrantClient

log = logging.getLogger(__name__)

MCP_PROTOCOL = "2026-07-28"  # pinned: no discovery round-trip per call

# The SDKs of the LLM, Qdrant and MCP clients build hundreds of pydantic models at
# import (~2 s of CPU together, most of the runtime's start). They are imported in a
# thread once the app serves (``Sdks.preload``): /health answers 503 meanwhile, and a
# request that needs them waits without blocking the event loop.
SDK_MODULES = ("openai", "qdrant_client", "mcp")


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


class Llm:
    """An OpenAI-compatible endpoint (vLLM or the simulator)."""

    def __init__(
        self, base_url: str, model: str, *, max_tokens: int, sdks: Sdks | None = None
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url.rstrip("/") + "/v1"
        self.sdks = sdks or Sdks()
        self._client: openai.AsyncOpenAI | None = None

    async def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            await self.sdks.ready()
            import openai  # lazy: see SDK_MODULES (already imported here)

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key="faultday", max_retries=0
            )
        return self._client

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        timeout: float,
        tools: list[dict[str, Any]] | None = None,
    ) -> LlmReply:
        client = await self.client()
        import openai  # lazy: see SDK_MODULES (already imported by client())

        try:
            kwargs: dict[str, Any] = {"tools": tools} if tools else {}
            resp = await client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=self.max_tokens,
                timeout=timeout,
                **kwargs,
            )
        except openai.APIStatusError as exc:
            raise _status_error(
                exc.status_code, exc.message, _retry_after(exc.response.headers)
            ) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc
        except openai.OpenAIError as exc:
            raise Permanent(f"{type(exc).__name__}: {exc}") from exc
        if not resp.choices:
            raise Retryable("empty completion (no choices)")
        msg = resp.choices[0].message
        calls = []
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None:
                continue
            try:
                args = json.loads(fn.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            calls.append(
                ToolCall(id=tc.id, name=fn.name, args=args if isinstance(args, dict) else {})
            )
        usage = getattr(resp, "usage", None)
        tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return LlmReply(
            text=msg.content or "",
            model=resp.model or self.model,
            tool_calls=calls,
            completion_tokens=tokens,
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


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
            resp = await self.http.post(self.url, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise Retryable(f"embedder: {type(exc).__name__}: {exc}") from exc
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
    """A Qdrant REST endpoint (the real server, or faultday's front over qdrant-edge)."""

    def __init__(
        self, base_url: str, *, collection: str, top_k: int, sdks: Sdks | None = None
    ) -> None:
        self.collection = collection
        self.top_k = top_k
        self.base_url = base_url
        self.sdks = sdks or Sdks()
        self._client: AsyncQdrantClient | None = None

    async def client(self) -> AsyncQdrantClient:
        if self._client is None:
            await self.sdks.ready()
            from qdrant_client import AsyncQdrantClient  # lazy: see SDK_MODULES

            self._client = AsyncQdrantClient(
                url=self.base_url, prefer_grpc=False, timeout=30, check_compatibility=False
            )
        return self._client

    async def search(self, vector: list[float], *, timeout: float) -> list[Hit]:
        client = await self.client()
        from qdrant_client.http.exceptions import (  # lazy: see SDK_MODULES
            ResponseHandlingException,
            UnexpectedResponse,
        )

        try:
            res = await client.query_points(
                self.collection,
                query=vector,
                limit=self.top_k,
                with_payload=True,
                timeout=max(1, int(timeout + 0.999)),
            )
        except UnexpectedResponse as exc:
            raise _status_error(exc.status_code or 500, str(exc)[:200]) from exc
        except (ResponseHandlingException, httpx.HTTPError) as exc:
            raise Retryable(f"vector: {type(exc).__name__}: {exc}") from exc
        hits = []
        for p in res.points:
            payload = p.payload or {}
            text = str(payload.get("text") or payload.get("body") or payload.get("title") or "")
            hits.append(Hit(id=str(p.id), score=float(p.score), text=text))
        return hits

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


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

    async def schemas(self, *, timeout: float) -> dict[str, dict[str, Any]]:
        """Each tool's JSON Schema, as the server lists it."""
        await self.sdks.ready()
        from mcp import Client as McpClient  # lazy: see SDK_MODULES

        try:
            async with McpClient(self.url, mode=MCP_PROTOCOL, read_timeout_seconds=timeout) as c:
                listed = await c.list_tools()
        except Exception as exc:
            raise Retryable(f"tools/list: {type(_leaf(exc)).__name__}: {_leaf(exc)}") from exc
        return {t.name: dict(t.input_schema) for t in listed.tools}

    async def call(
        self, name: str, args: dict[str, Any], *, timeout: float, meta: dict[str, str]
    ) -> ToolResult:
        await self.sdks.ready()
        from mcp import Client as McpClient  # lazy: see SDK_MODULES
        from mcp.shared.exceptions import MCPError

        try:
            async with McpClient(self.url, mode=MCP_PROTOCOL, read_timeout_seconds=timeout) as c:
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
