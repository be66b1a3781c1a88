"""Participants run beside the timeline: the load generator and the observers.

The engine knows them only through this protocol; ``faultday.load`` and
``faultday.observe`` provide the real ones (Locust in a subprocess, metric
scrapers, trace and audit collectors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from faultday.core.clock import Clock
from faultday.core.ledger import Ledger
from faultday.core.records import Observations
from faultday.core.targets import Target
from faultday.scenario.models import Scenario


class RunView(Protocol):
    """The parts of a run a participant may use."""

    @property
    def scenario(self) -> Scenario: ...

    @property
    def run_dir(self) -> Path: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def ledger(self) -> Ledger:
        """Where a participant records a process before it spawns it (recover stops it)."""
        ...

    @property
    def observations(self) -> Observations: ...

    def endpoints(self) -> dict[str, str]: ...

    def target(self, name: str) -> Target: ...

    def event(self, kind: str, message: str = "", **data: object) -> None:
        """Add an event to the run's timeline (breaker opened, replica restarted …)."""
        ...

    def error(self, message: str) -> None:
        """Report a failure of a participant: logged at ERROR, journaled, fails the run."""
        ...


class Participant(Protocol):
    name: str

    def start(self, run: RunView) -> None:
        """Begin (load starts at warm-up); must return promptly."""
        ...

    def stop(self) -> None:
        """Stop and flush everything observed; bounded in time; idempotent."""
        ...


def default_participants(scenario: Scenario) -> list[Participant]:
    """The load and observers a scenario asks for."""
    try:
        from faultday.load.participants import participants_for
    except ImportError:  # the load/observe modules are not installed in this build
        return []
    return participants_for(scenario)
