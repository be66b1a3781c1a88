"""Scenario time for things observed outside the engine's thread (other processes, scrapers)."""

from __future__ import annotations

import time

from faultday.core.clock import Clock


class TimeBase:
    """Maps wall-clock times to scenario seconds, before and after the engine starts its clock.

    A participant starts before warm-up, when t=0 is only expected (now + warm-up);
    the engine sets the exact t=0 when warm-up ends (``Clock.start``).
    """

    def __init__(self, clock: Clock, *, warmup: float) -> None:
        self.clock = clock
        self._t0_before = clock.t0_wall
        self.expected_t0 = time.time() + warmup * clock.scale

    def started(self) -> bool:
        # The fallback covers a clock started before us (benches, tests): t0 never changes then.
        return self.clock.t0_wall != self._t0_before or time.time() >= self.expected_t0 + 1.0

    def t0_wall(self) -> float:
        return self.clock.t0_wall if self.started() else self.expected_t0

    def at(self, wall: float) -> float:
        """Scenario seconds at wall-clock time ``wall`` (negative during warm-up)."""
        return (wall - self.t0_wall()) / self.clock.scale

    def exact(self, wall: float) -> float | None:
        """Like ``at``, but None while t=0 is still only expected."""
        return self.at(wall) if self.started() else None
