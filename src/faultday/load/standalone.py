"""A RunView without the engine: load and observers against given endpoints (benches, tests)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from faultday.core.clock import Clock
from faultday.core.events import RunEvents
from faultday.core.ledger import Ledger
from faultday.core.protocols import StackDriver
from faultday.core.records import Observations
from faultday.core.scenario import Scenario
from faultday.core.targets import Target
from faultday.errors import StackError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StandaloneRun:
    """Everything a participant may use, with endpoints given instead of a stack."""

    scenario: Scenario
    run_dir: Path
    urls: dict[str, str]
    clock: Clock = field(default_factory=Clock)
    observations: Observations = field(default_factory=Observations)
    timeline: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)
    events: RunEvents = field(default_factory=RunEvents)  # fired by whoever drives the run
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ledger(self) -> Ledger:
        return Ledger.in_dir(self.run_dir)

    @property
    def stack(self) -> StackDriver | None:
        return None  # endpoints are given; no driver runs the stack (nor the load)

    def endpoints(self) -> dict[str, str]:
        return dict(self.urls)

    def target(self, name: str) -> Target:
        raise StackError(f"no stack in a standalone run (asked for {name!r})")

    def event(self, kind: str, message: str = "", **data: object) -> None:
        with self._lock:
            self.timeline.append((kind, message, data))
        log.info("%s %s", kind, message)

    def error(self, message: str) -> None:
        log.error("%s", message)
        with self._lock:
            self.errors.append(message)
