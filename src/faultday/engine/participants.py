"""Participants run beside the timeline: the load generator and the observers.

The engine knows them only through ``faultday.core.protocols``; ``faultday.load`` and
``faultday.observe`` provide the real ones (Locust in a subprocess, metric
scrapers, trace and audit collectors).
"""

from __future__ import annotations

from faultday.core.protocols import Participant, RunView
from faultday.core.scenario import Scenario

__all__ = ["Participant", "RunView", "default_participants"]


def default_participants(scenario: Scenario) -> list[Participant]:
    """The load and observers a scenario asks for."""
    try:
        from faultday.load.participants import participants_for
    except ImportError:  # the load/observe modules are not installed in this build
        return []
    return participants_for(scenario)
