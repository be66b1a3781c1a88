"""Run time: scenario seconds from t=0 (end of warm-up), compressed by a time scale."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Clock:
    """Maps wall time to scenario time. ``scale=0.1`` runs a 120 s scenario in 12 s."""

    scale: float = 1.0
    t0_mono: float = field(default_factory=time.monotonic)
    t0_wall: float = field(default_factory=time.time)

    def start(self) -> None:
        self.t0_mono = time.monotonic()
        self.t0_wall = time.time()

    def now(self) -> float:
        """Scenario seconds since t=0 (negative before it)."""
        return (time.monotonic() - self.t0_mono) / self.scale

    def wall(self, scenario_seconds: float) -> float:
        """Real seconds that ``scenario_seconds`` of scenario time take."""
        return scenario_seconds * self.scale

    def sleep_until(self, t: float, *, cap: float) -> None:
        """Sleep until scenario time ``t``, at most ``cap`` real seconds."""
        delay = min(cap, (t - self.now()) * self.scale)
        if delay > 0:
            time.sleep(delay)
