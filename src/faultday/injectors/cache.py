"""Redis faults: ``cache_flush`` (sessions and checkpoints lost) and ``redis_outage``.

``redis_outage`` on an *edge* disables the proxy in front of Redis (the edge
primitive, ``injectors.edge``), so clients see refused connections; on a
*component* it stops the server process (SIGSTOP, SIGCONT at revert), so
clients hang until their timeouts. (Redis's ``CLIENT PAUSE ALL`` would be
gentler but also blocks the ``CLIENT UNPAUSE`` that should end it: Redis 7.0
queues it like any other command.) ``cache_flush`` is one-shot: data that is
gone stays gone, and its revert only records that.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable
from typing import ClassVar

import psutil
import redis
from pydantic import BaseModel, ConfigDict, Field

from faultday.core.targets import Revert, Target, TargetKind
from faultday.errors import InjectionError
from faultday.injectors import edge
from faultday.injectors.base import FaultContext, Injector, RevertData
from faultday.injectors.edge import ENABLE_PROXY, PROXY_NAME_ALIASES, EdgeData

log = logging.getLogger(__name__)

REDIS = "redis"
TIMEOUT_S = 5.0
SCAN_BATCH = 500


class CacheFlushParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str | None = Field(
        default=None, description="delete only matching keys (e.g. 'fd:session:*'); default all"
    )


class RedisOutageParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def redis_url(target: Target) -> str:
    url = target.url
    if not url:
        raise InjectionError(f"{target.name}: no url for the Redis component")
    return url if "://" in url else f"redis://{url}"


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)


class FlushData(RevertData):
    url: str
    pattern: str | None


class CacheFlush(Injector[CacheFlushParams, FlushData]):
    """Lose every session and checkpoint: FLUSHDB (or delete the keys matching a pattern)."""

    name = "cache_flush"
    summary = "Redis data lost (FLUSHDB or a key pattern); one-shot"
    Params = CacheFlushParams
    Data = FlushData
    component_types: ClassVar[frozenset[str] | None] = frozenset({REDIS})
    one_shot: ClassVar[bool] = True

    def prepare(
        self, ctx: FaultContext, target: Target, params: CacheFlushParams, *, fault: str
    ) -> Revert:
        data = FlushData(url=redis_url(target), pattern=params.pattern)
        return self.record(target, fault=fault, action="record_only", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: CacheFlushParams, revert: Revert
    ) -> None:
        try:
            with _client(redis_url(target)) as r:
                if params.pattern is None:
                    r.flushdb()
                    return
                deleted = 0
                for batch in _batches(r.scan_iter(match=params.pattern, count=SCAN_BATCH)):
                    deleted += int(r.delete(*batch))
                log.info("%s: deleted %d keys matching %s", target.name, deleted, params.pattern)
        except redis.RedisError as exc:
            raise InjectionError(f"{target.name}: flush failed: {exc}") from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        # Lost data cannot be given back; the revert exists so the ledger shows the fault closed.
        log.info("%s: cache_flush is one-shot; nothing to revert", revert.target)


def _batches(keys: Iterable[bytes]) -> list[list[bytes]]:
    out: list[list[bytes]] = [[]]
    for k in keys:
        if len(out[-1]) >= SCAN_BATCH:
            out.append([])
        out[-1].append(k)
    return [b for b in out if b]


class OutageData(EdgeData):
    """Either form of the revert: re-enable the edge's proxy (the edge primitive's data,
    as ``vector_outage`` and ``outage`` store it), or SIGCONT the process."""

    proxy_api: str = ""
    proxy_name: str = Field(default="", validation_alias=PROXY_NAME_ALIASES)
    pid: int = 0
    create_time: float = 0.0


class RedisOutage(Injector[RedisOutageParams, OutageData]):
    """Redis unreachable: the edge's proxy disabled, or the server paused (CLIENT PAUSE ALL)."""

    name = "redis_outage"
    summary = "Redis unreachable (proxy disabled) or unresponsive (SIGSTOP)"
    Params = RedisOutageParams
    Data = OutageData
    target_kinds: ClassVar[frozenset[TargetKind]] = frozenset(
        {TargetKind.EDGE, TargetKind.COMPONENT}
    )
    component_types: ClassVar[frozenset[str] | None] = frozenset({REDIS})

    def prepare(
        self, ctx: FaultContext, target: Target, params: RedisOutageParams, *, fault: str
    ) -> Revert:
        if target.kind == TargetKind.EDGE:
            data = OutageData.for_target(target)
            return self.record(target, fault=fault, action=ENABLE_PROXY, data=data)
        if target.pid is None:
            raise InjectionError(f"{target.name}: no pid to stop (component not run by us?)")
        try:
            created = psutil.Process(target.pid).create_time()
        except psutil.NoSuchProcess as exc:
            raise InjectionError(f"{target.name}: process {target.pid} is not running") from exc
        data = OutageData(pid=target.pid, create_time=created)
        return self.record(target, fault=fault, action="sigcont", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: RedisOutageParams, revert: Revert
    ) -> None:
        if revert.action == ENABLE_PROXY:
            edge.disable(self.data(revert), target=target.name)
            return
        try:
            os.kill(self.data(revert).pid, signal.SIGSTOP)
        except ProcessLookupError as exc:
            raise InjectionError(f"{target.name}: process gone before SIGSTOP") from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        if revert.action == ENABLE_PROXY:
            edge.enable(d, target=revert.target)
            return
        pid = d.pid
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - d.create_time) > 0.01:
                log.info("%s: pid %d was recycled; nothing to continue", revert.target, pid)
                return
            proc.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:
            log.info("%s: process %d is gone; nothing to continue", revert.target, pid)
