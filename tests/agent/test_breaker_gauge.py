"""The breaker gauge shows half-open while a probe is in flight (purgatory reports it late)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from opentelemetry import trace
from tests.conftest import ROOT

from faultday_refstack.agent.config import load_config, select_policy
from faultday_refstack.agent.obs import Metrics
from faultday_refstack.agent.resilience import (
    Deadline,
    DependencyError,
    Resilience,
    Retryable,
)


def test_half_open_is_visible_during_the_probe() -> None:
    cfg = load_config(Path(ROOT / "stack" / "agent.yaml"))
    policy = select_policy(cfg, "default", file="agent.yaml")
    policy = policy.model_copy(
        update={"breakers": policy.breakers.model_copy(update={"reset_after": 0.3})}
    )
    metrics = Metrics()
    res = Resilience(policy, metrics, trace.get_tracer("test"))
    gauge = metrics.breaker_state.labels("dep")
    seen: list[float] = []
    t0 = time.monotonic()

    async def call(_timeout: float) -> int:
        seen.append(gauge._value.get())
        await asyncio.sleep(0.01)
        if time.monotonic() - t0 < 0.5:
            raise Retryable("down")
        return 1

    async def main() -> None:
        for _ in range(40):
            with contextlib.suppress(DependencyError):
                await res.call("dep", call, timeout=1.0, deadline=Deadline(2.0))
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert 1.0 in seen, seen  # a probe ran while the gauge said half-open
    assert res.breaker_state("dep") == "closed"
    assert gauge._value.get() == 0.0
