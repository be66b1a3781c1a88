"""Toxiproxy 2.x's HTTP API on a small asyncio HTTP/1.1 server (keep-alive, JSON).

A hand-rolled server rather than an ASGI stack: the API shares the proxies'
event loop (as Toxiproxy's does), starts in milliseconds and needs nothing
beyond the standard library; applying a toxic is one loop iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, JsonValue, ValidationError

from faultday.proxy.metrics import render_metrics
from faultday.proxy.models import (
    TOXIPROXY_VERSION,
    ProxySpec,
    ProxyUpdate,
    ToxicSpec,
    validation_message,
)
from faultday.proxy.server import Proxy, ProxyError
from faultday.proxy.toxics import Toxic

if TYPE_CHECKING:
    from faultday.proxy.server import ProxyServer

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 120.0
MAX_BODY = 1 << 20


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    500: "Internal Server Error",
}


def _json(status: int, value: JsonValue) -> Reply:
    return Reply(status, json.dumps(value, separators=(",", ":")).encode())


def _error(status: int, message: str) -> Reply:
    return _json(status, {"error": message, "status": status})


def _parse(model: type[BaseModel], body: JsonValue) -> BaseModel:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ApiError(400, validation_message(exc)) from exc


class ApiHandler:
    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self._tasks: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Cancel open API connections and wait (bounded) until they are gone."""
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except (TimeoutError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError, TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = ([*lines[0].split(" ", 2), "", ""])[:3]
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if key:
                headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or "0")
        if length > MAX_BODY:
            reply = _error(400, "body too large")
            body = b""
        else:
            body = (
                await asyncio.wait_for(reader.readexactly(length), IDLE_TIMEOUT) if length else b""
            )
            reply = await self._dispatch(method, target, body)
        keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        out = [
            f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}",
            f"Content-Type: {reply.content_type}",
            f"Content-Length: {len(reply.body)}",
        ]
        if not keep:
            out.append("Connection: close")
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + reply.body)
        await asyncio.wait_for(writer.drain(), IDLE_TIMEOUT)
        return keep

    async def _dispatch(self, method: str, target: str, body: bytes) -> Reply:
        parts = [unquote(p) for p in urlsplit(target).path.split("/") if p]
        try:
            data: JsonValue = json.loads(body) if body.strip() else {}
        except json.JSONDecodeError as exc:
            return _error(400, f"invalid JSON: {exc}")
        try:
            return await self._route(method, parts, data)
        except ApiError as exc:
            return _error(exc.status, exc.message)
        except ProxyError as exc:
            return _error(500, str(exc))

    async def _route(  # noqa: PLR0911 - a flat route table reads best
        self, method: str, parts: list[str], data: JsonValue
    ) -> Reply:
        n = len(parts)
        if parts == ["version"] and method == "GET":
            return _json(200, {"version": TOXIPROXY_VERSION, "server": "faultday"})
        if parts == ["metrics"] and method == "GET":
            return Reply(200, render_metrics(self.server), "text/plain; version=0.0.4")
        if parts == ["reset"] and method == "POST":
            return await self._reset()
        if parts == ["populate"] and method == "POST":
            return await self._populate(data)
        if n == 1 and parts[0] == "proxies":
            if method == "GET":
                return _json(200, {k: p.to_json() for k, p in self.server.proxies.items()})
            if method == "POST":
                return _json(201, (await self._create(data)).to_json())
        if n >= 2 and parts[0] == "proxies":
            return await self._proxy_route(method, self._proxy(parts[1]), parts[2:], data)
        raise ApiError(404 if method in {"GET", "POST", "DELETE"} else 405, "not found")

    async def _proxy_route(  # noqa: PLR0911, PLR0912 - a flat route table reads best
        self, method: str, proxy: Proxy, rest: list[str], data: JsonValue
    ) -> Reply:
        if not rest:
            if method == "GET":
                return _json(200, proxy.to_json())
            if method == "POST":
                return _json(200, (await self._update(proxy, data)).to_json())
            if method == "DELETE":
                proxy.stop()
                self.server.proxies.pop(proxy.name, None)
                return Reply(204)
        elif rest == ["counters"] and method == "GET":
            return _json(200, proxy.counters.snapshot(proxy.name).to_json())
        elif rest == ["toxics"]:
            if method == "GET":
                return _json(200, [t.to_json() for t in proxy.toxics])
            if method == "POST":
                return _json(200, self._add_toxic(proxy, data).to_json())
        elif len(rest) == 2 and rest[0] == "toxics":
            toxic = proxy.toxic(rest[1])
            if toxic is None:
                raise ApiError(404, "toxic not found")
            if method == "GET":
                return _json(200, toxic.to_json())
            if method == "POST":
                return _json(200, self._update_toxic(proxy, toxic, data).to_json())
            if method == "DELETE":
                proxy.remove_toxic(toxic)
                return Reply(204)
        raise ApiError(405 if rest in (["toxics"], []) else 404, "not found")

    def _proxy(self, name: str) -> Proxy:
        proxy = self.server.proxies.get(name)
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def _create(self, data: JsonValue) -> Proxy:
        spec = _parse(ProxySpec, data)
        assert isinstance(spec, ProxySpec)
        return await self.create(spec)

    async def create(self, spec: ProxySpec) -> Proxy:
        """Create (and start, when enabled) one proxy; ApiError 409 when the name is taken."""
        if spec.name in self.server.proxies:
            raise ApiError(409, "proxy already exists")
        try:
            proxy = Proxy(self.server.loop, spec, self.server.relay, self.server.native_id())
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        if spec.enabled:
            await self._start(proxy)
        self.server.proxies[spec.name] = proxy
        return proxy

    async def _start(self, proxy: Proxy) -> None:
        try:
            await proxy.start()
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc

    async def _update(self, proxy: Proxy, data: JsonValue) -> Proxy:
        upd = _parse(ProxyUpdate, data)
        assert isinstance(upd, ProxyUpdate)
        moved = (upd.listen is not None and upd.listen != proxy.listen) or (
            upd.upstream is not None and upd.upstream != proxy.upstream
        )
        was = proxy.enabled
        if moved or upd.enabled is False:
            proxy.stop()
        if upd.upstream is not None:
            proxy.set_upstream(upd.upstream)
        if upd.listen is not None:
            proxy.listen = upd.listen
        if upd.enabled is True or (upd.enabled is None and was):
            await self._start(proxy)
        return proxy

    def _add_toxic(self, proxy: Proxy, data: JsonValue) -> Toxic:
        spec = _parse(ToxicSpec, data)
        assert isinstance(spec, ToxicSpec)
        if proxy.toxic(spec.resolved_name()) is not None:
            raise ApiError(409, "toxic already exists")
        toxic = Toxic(spec, self._attrs(spec))
        proxy.add_toxic(toxic)
        return toxic

    def _update_toxic(self, proxy: Proxy, toxic: Toxic, data: JsonValue) -> Toxic:
        if not isinstance(data, dict):
            raise ApiError(400, "expected a JSON object")
        attrs = data.get("attributes", {})
        if not isinstance(attrs, dict):
            raise ApiError(400, "attributes: expected an object")
        merged = {**toxic.attrs.model_dump(mode="json"), **attrs}
        spec = _parse(
            ToxicSpec,
            {
                "name": toxic.name,
                "type": toxic.type,
                "stream": data.get("stream", toxic.stream.value),
                "toxicity": data.get("toxicity", toxic.toxicity),
                "attributes": merged,
            },
        )
        assert isinstance(spec, ToxicSpec)
        toxic.attrs = self._attrs(spec)
        toxic.toxicity = spec.toxicity
        toxic.stream = spec.stream
        proxy.notify()
        return toxic

    @staticmethod
    def _attrs(spec: ToxicSpec) -> BaseModel:
        try:
            return spec.parsed_attributes()
        except ValidationError as exc:
            raise ApiError(400, f"attributes: {validation_message(exc)}") from exc

    async def _reset(self) -> Reply:
        for proxy in self.server.proxies.values():
            proxy.clear_toxics()
            if not proxy.enabled:
                await self._start(proxy)
        return Reply(204)

    async def _populate(self, data: JsonValue) -> Reply:
        items = data.get("proxies") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ApiError(400, "expected a JSON array of proxies")
        specs = []
        for item in items:
            spec = _parse(ProxySpec, item)
            assert isinstance(spec, ProxySpec)
            specs.append(spec)
        out: list[JsonValue] = []
        for spec in specs:
            existing = self.server.proxies.get(spec.name)
            if existing is not None and (
                existing.upstream != spec.upstream or not _same_listen(existing.listen, spec.listen)
            ):
                existing.stop()
                del self.server.proxies[spec.name]
                existing = None
            if existing is None:
                existing = await self._create(spec.model_dump())
            elif spec.enabled != existing.enabled:
                await self._update(existing, {"enabled": spec.enabled})
            out.append(existing.to_json())
        return _json(201, {"proxies": out})


def _same_listen(current: str, wanted: str) -> bool:
    # A proxy created with port 0 got an ephemeral port; asking again for port 0 matches.
    if wanted.endswith(":0"):
        return current.rsplit(":", 1)[0] == wanted.rsplit(":", 1)[0]
    return current == wanted
