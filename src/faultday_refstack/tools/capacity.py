"""Per-tool capacity (concurrency plus a bounded queue) and the injected faults on top of it."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

# The body of PUT /admin/faults/{id} is shared with the harness's injectors.
from faultday_wire.admin import ToolFault

__all__ = ["Capacity", "Effective", "Limiter", "Overloaded", "ToolFault"]


@dataclass(frozen=True, slots=True)
class Effective:
    concurrency: int
    queue: int
    latency_s: float
    error_rate: float


class Overloaded(Exception):
    """The tool is at capacity; the caller should come back after ``retry_after`` seconds."""

    def __init__(self, tool: str, retry_after: float, why: str) -> None:
        super().__init__(f"tool {tool!r} overloaded ({why}); retry after {retry_after:g}s")
        self.tool = tool
        self.retry_after = retry_after


class Limiter:
    """Concurrency + bounded FIFO queue for one tool; the caps can change while it runs."""

    def __init__(self, tool: str, *, concurrency: int, queue: int, queue_timeout: float) -> None:
        self.tool = tool
        self.base_concurrency = concurrency
        self.base_queue = queue
        self.queue_timeout = queue_timeout
        self.cap = concurrency  # current cap: base, or lower while a fault is active
        self.in_flight = 0
        self.waiting = 0
        self._cond = asyncio.Condition()

    def retry_after(self, concurrency: int) -> float:
        # A rough drain time: one queue timeout per full round of the queue.
        rounds = (self.waiting + 1) / max(concurrency, 1)
        return float(max(1, math.ceil(rounds * self.queue_timeout)))

    @asynccontextmanager
    async def slot(self, eff: Effective) -> AsyncIterator[None]:
        async with self._cond:
            if self.in_flight >= self.cap:
                if self.waiting >= eff.queue:
                    raise Overloaded(self.tool, self.retry_after(self.cap), "queue full")
                self.waiting += 1
                try:
                    await asyncio.wait_for(
                        self._cond.wait_for(lambda: self.in_flight < self.cap),
                        timeout=self.queue_timeout,
                    )
                except TimeoutError as exc:
                    raise Overloaded(
                        self.tool, self.retry_after(self.cap), "queue wait timed out"
                    ) from exc
                finally:
                    self.waiting -= 1
            self.in_flight += 1
        try:
            yield
        finally:
            async with self._cond:
                self.in_flight -= 1
                self._cond.notify_all()

    async def set_cap(self, cap: int) -> None:
        """Change the cap; waiters that a raised cap now admits are woken."""
        async with self._cond:
            self.cap = cap
            self._cond.notify_all()


class Capacity:
    """All tools' limiters and the active faults; owned by one server instance."""

    def __init__(
        self, tools: list[str], *, concurrency: int, queue: int, queue_timeout: float, seed: int
    ) -> None:
        self.limiters = {
            t: Limiter(t, concurrency=concurrency, queue=queue, queue_timeout=queue_timeout)
            for t in tools
        }
        self.faults: dict[str, ToolFault] = {}
        self.rng = random.Random(seed)  # noqa: S311 - fault dice, not crypto

    def effective(self, tool: str) -> Effective:
        lim = self.limiters[tool]
        conc, queue, latency, err = lim.base_concurrency, lim.base_queue, 0.0, 0.0
        for f in self.faults.values():
            if not f.applies(tool):
                continue
            if f.concurrency is not None:
                conc = min(conc, f.concurrency)
            if f.queue is not None:
                queue = min(queue, f.queue)
            latency += f.latency_s
            err = max(err, f.error_rate)
        return Effective(concurrency=conc, queue=queue, latency_s=latency, error_rate=err)

    async def refresh(self) -> None:
        """Apply changed caps and wake waiters that a raised cap now admits."""
        for name, lim in self.limiters.items():
            await lim.set_cap(self.effective(name).concurrency)

    def roll_error(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate
