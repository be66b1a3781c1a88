"""cache_flush and redis_outage (component mode) against a real redis-server."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import redis
from procs import Procs

from faultday.core.targets import Target, TargetKind
from faultday.errors import InjectionError
from faultday.injectors.cache import CacheFlush, RedisOutage
from faultday.injectors.vector import VectorOutage


class Ctx:
    run_dir = Path()
    live = True


def test_cache_flush_pattern_and_all(tmp_path: Path) -> None:
    p = Procs(tmp_path)
    try:
        proc, url = p.redis()
        r = redis.Redis.from_url(url)
        r.set("fd:session:a", "1")
        r.set("keep", "1")
        target = Target("redis", TargetKind.COMPONENT, "redis", url=url, pid=proc.pid)
        inj = CacheFlush()
        params = inj.parse({"pattern": "fd:session:*"})
        rev = inj.prepare(Ctx(), target, params, fault="f")  # type: ignore[arg-type]
        inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
        assert r.keys("*") == [b"keep"]
        full = inj.parse({})
        inj.inject(Ctx(), target, full, inj.prepare(Ctx(), target, full, fault="g"))  # type: ignore[arg-type]
        assert r.dbsize() == 0
        inj.revert(Ctx(), rev)  # type: ignore[arg-type]  # one-shot: records only
    finally:
        p.close()


def test_redis_outage_component_stops_and_resumes(tmp_path: Path) -> None:
    p = Procs(tmp_path)
    try:
        proc, url = p.redis()
        target = Target("redis", TargetKind.COMPONENT, "redis", url=url, pid=proc.pid)
        inj = RedisOutage()
        params = inj.parse({})
        rev = inj.prepare(Ctx(), target, params, fault="o")  # type: ignore[arg-type]
        inj.inject(Ctx(), target, params, rev)  # type: ignore[arg-type]
        r = redis.Redis.from_url(url, socket_timeout=0.3, socket_connect_timeout=0.3)
        with pytest.raises(redis.TimeoutError):
            r.ping()
        inj.revert(Ctx(), rev)  # type: ignore[arg-type]
        inj.revert(Ctx(), rev)  # type: ignore[arg-type]  # idempotent
        with contextlib.closing(redis.Redis.from_url(url, socket_timeout=2)) as r2:
            assert r2.ping()
    finally:
        p.close()


def test_edge_faults_need_a_proxy() -> None:
    edge = Target("agent->qdrant", TargetKind.EDGE)
    with pytest.raises(InjectionError, match="proxy_api"):
        VectorOutage().prepare(Ctx(), edge, VectorOutage().parse({}), fault="v")  # type: ignore[arg-type]
