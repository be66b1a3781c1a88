"""The journal's subscription to the run's hooks: one path from "it happened" to the journal.

The engine fires a hook once (core/events.py); this recorder, subscribed ahead of every
other listener, turns the payloads that have a journal kind into the journal's events
and check results. What a participant reports of itself (``load.started``,
``scrape.stopped`` …) and the run's own errors, aborts, reverts' end and sweep have no
hook and are written by ``Run.event`` and ``Run.error`` directly. The ledger (intent
before action) is not an event and is written by the engine before it fires.

A failure here is the hook's like any listener's: logged at ERROR, journaled as an
error by the run (its verdict becomes error), and never stops the run nor a revert.
"""

from __future__ import annotations

from typing import Protocol

from faultday.core.events import (
    CheckEvaluated,
    FaultApplied,
    FaultInjectFailed,
    FaultReverted,
    PhaseEntered,
    RunEvents,
)
from faultday.core.journal import Journal, JournalCheck
from faultday.core.vocab import EventKind

__all__ = ["JournalRecorder"]


class EventsAt(Protocol):
    """The run's journal events, stamped with the scenario time a hook's payload gives."""

    def event(self, kind: str, message: str = "", **data: object) -> None: ...


class Timeline(Protocol):
    """What the recorder writes through: the run's journal, its events and its errors."""

    @property
    def journal(self) -> Journal: ...

    def at(self, t: float) -> EventsAt: ...

    def error(self, message: str) -> None: ...


class JournalRecorder:
    """Writes a run's hook payloads into its journal, from ``subscribe`` to ``unsubscribe``."""

    def __init__(self, run: Timeline) -> None:
        self._run = run

    def subscribe(self, events: RunEvents) -> None:
        """Listen first on every hook that has a journal kind."""
        events.phase.add_first(self.phase)
        events.fault_applied.add_first(self.fault_applied)
        events.fault_inject_failed.add_first(self.fault_inject_failed)
        events.fault_reverted.add_first(self.fault_reverted)
        events.check_evaluated.add_first(self.check_evaluated)

    def unsubscribe(self, events: RunEvents) -> None:
        events.phase.remove_listener(self.phase)
        events.fault_applied.remove_listener(self.fault_applied)
        events.fault_inject_failed.remove_listener(self.fault_inject_failed)
        events.fault_reverted.remove_listener(self.fault_reverted)
        events.check_evaluated.remove_listener(self.check_evaluated)

    def phase(self, p: PhaseEntered) -> None:
        self._run.at(p.t).event(EventKind.PHASE, str(p.phase))

    def fault_applied(self, p: FaultApplied) -> None:
        self._run.at(p.t).event(
            EventKind.FAULT_INJECTED,
            f"{p.injector} on {p.target}",
            fault=p.fault,
            target=p.target,
            injector=p.injector,
        )

    def fault_inject_failed(self, p: FaultInjectFailed) -> None:
        self._run.at(p.t).event(
            EventKind.FAULT_INJECT_FAILED, p.error, fault=p.fault, target=p.target
        )

    def fault_reverted(self, p: FaultReverted) -> None:
        if not p.ok:  # a revert that failed fails the run
            self._run.error(f"revert of {p.fault!r} on {p.target} failed: {p.error}")
            return
        self._run.at(p.t).event(
            EventKind.FAULT_REVERTED, f"{p.injector} on {p.target}", fault=p.fault, target=p.target
        )

    def check_evaluated(self, p: CheckEvaluated) -> None:
        self._run.journal.checks.append(
            JournalCheck(
                section=p.section,
                check=p.check,
                label=p.label,
                window=p.window,
                verdict=p.verdict,
                expected=p.expected,
                observed=p.observed,
                n=p.n,
                message=p.message,
                params=dict(p.params),
            )
        )
