"""The run event catalogue: one typed hook per thing that happens in a run's life.

Modelled on Locust's ``Events``/``EventHook``: a :class:`RunEvents` object carries one
:class:`EventHook` per event kind; a listener subscribes with ``add_listener`` (usable
as a decorator) and receives the event's payload, a frozen slotted dataclass below.
The live displays of ``faultday run`` and ``faultday gameday``, the pytest plugin and
the observers that look again when a fault acts (the metrics scraper, the process
sampler) all listen here; the engine, the session and the game day fire.

A listener that raises never breaks the run nor a revert: :meth:`EventHook.fire` logs
its exception at ERROR and returns it as a :class:`ListenerFailure`, which whoever
fired records (the engine and the session in the journal's errors, so the run's
verdict becomes error; the game day in its notes). A run fires with a
:class:`FailureTally`: only the first failure of each (hook, listener) is logged and
returned, the repeats are counted (a ``status`` listener that always raises would
otherwise add an error every tick). Listeners run on the firing thread, in the order
they were added, and must return promptly.

The run's journal is a subscriber too (``engine/journal_recorder.py``), added first to
the hooks that have a journal kind, so a listener added before it still comes after
the journal entry. A hook says nothing of which run fired it: one ``RunEvents`` serves
one run at a time.

The catalogue, who fires each hook and when, is listed in ``docs/architecture.md``
(``HOOKS`` below is its source; ``tests/docs/test_architecture.py`` keeps the two
in step).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import JsonValue

from faultday.core.journal import Journal
from faultday.core.vocab import Phase, PreflightVerdict, RunVerdict, Section, Verdict

__all__ = [
    "HOOKS",
    "AbortTripped",
    "CheckEvaluated",
    "EventHook",
    "FailureTally",
    "FaultApplied",
    "FaultInjectFailed",
    "FaultReverted",
    "GameDayEnded",
    "HookSpec",
    "ListenerFailure",
    "PhaseEntered",
    "PreflightDone",
    "PreflightStarted",
    "RunEvents",
    "RunStarted",
    "ScenarioEnded",
    "ScenarioStarted",
    "StackUp",
    "Status",
]

log = logging.getLogger(__name__)

P = TypeVar("P")


# ---- payloads ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreflightStarted:
    """The game day's preflight of a stack profile begins (not fired when skipped)."""

    profile: str


@dataclass(frozen=True, slots=True)
class PreflightDone:
    """The game day's preflight ended; also fired when skipped (verdict ``skipped``)."""

    verdict: PreflightVerdict
    reason: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ScenarioStarted:
    """The game day starts its next scenario (``index`` counts from 0 of ``total``)."""

    scenario: str
    index: int
    total: int


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The run and its folder exist; nothing has started yet."""

    scenario: str
    run_id: str
    run_dir: Path


@dataclass(frozen=True, slots=True)
class StackUp:
    """The run's stack is up (its own, or a shared one it neither starts nor stops)."""

    driver: str  # the driver's plugin name: process, docker, kubernetes
    shared: bool
    stack_dir: Path  # the stack's own folder (logs, ledger); a shared stack's is not the run's


@dataclass(frozen=True, slots=True)
class PhaseEntered:
    """The run entered a phase (the journal's ``phase`` event; the ledger noted it first)."""

    phase: Phase
    t: float  # scenario seconds, as the journal event's


@dataclass(frozen=True, slots=True)
class Status:
    """What a live display shows: fired on every phase change and each sample interval."""

    phase: Phase
    t: float
    duration: float
    active_faults: tuple[str, ...]
    requests: int
    errors: int


@dataclass(frozen=True, slots=True)
class FaultApplied:
    """A fault took effect on its target (the journal's ``fault.injected``)."""

    fault: str
    injector: str
    target: str
    t: float


@dataclass(frozen=True, slots=True)
class FaultInjectFailed:
    """A fault could not be injected (the journal's ``fault.inject_failed``); its revert
    runs next and the run stops with verdict error."""

    fault: str
    injector: str
    target: str
    t: float
    error: str


@dataclass(frozen=True, slots=True)
class FaultReverted:
    """A fault's revert ran; ``ok`` is False when it failed (the run's verdict is error)."""

    fault: str
    injector: str
    target: str
    t: float
    ok: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class CheckEvaluated:
    """A check was judged over a window (the journal recorder adds it to the journal)."""

    section: Section
    check: str
    label: str
    window: str
    verdict: Verdict
    expected: str
    observed: str
    n: int = 0  # how many samples or requests the verdict rests on
    message: str = ""  # why, when the verdict is error or insufficient
    params: Mapping[str, JsonValue] = field(default_factory=dict)  # the check's own keys


@dataclass(frozen=True, slots=True)
class AbortTripped:
    """An abort condition failed; the run stops and reverts every fault."""

    reason: str
    check: str
    t: float


@dataclass(frozen=True, slots=True)
class ScenarioEnded:
    """A scenario's run is over, its journal final (reports are rendered after)."""

    scenario: str
    journal: Journal
    run_dir: Path


@dataclass(frozen=True, slots=True)
class GameDayEnded:
    """Every scenario of a game day ran (or it stopped); its scorecard is final."""

    id: str
    folder: Path
    verdict: RunVerdict
    score: float | None
    scenarios: int


# ---- the hooks ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListenerFailure:
    """A listener raised: which hook, which listener, what it raised."""

    hook: str
    listener: str
    error: str
    where: str = ""  # the innermost frame of its traceback: file:line in function

    def describe(self) -> str:
        at = f" (at {self.where})" if self.where else ""
        return f"event listener {self.listener} of {self.hook} failed: {self.error}{at}"


class FailureTally:
    """A run's listener failures by (hook, listener): the first is logged and recorded,
    the repeats only counted, so a listener that fails on every tick fails the run once."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def first(self, failure: ListenerFailure) -> bool:
        """Count ``failure``; True when it is the first of its hook and listener."""
        key = (failure.hook, failure.listener)
        self._counts[key] = self._counts.get(key, 0) + 1
        return self._counts[key] == 1

    def count(self, hook: str, listener: str) -> int:
        """How many times the hook's listener failed so far."""
        return self._counts.get((hook, listener), 0)


class EventHook(Generic[P]):
    """Listeners of one event kind; ``fire`` calls each in turn and contains its failure."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[Callable[[P], None]] = []

    def add_listener(self, listener: Callable[[P], None]) -> Callable[[P], None]:
        """Subscribe ``listener``; returns it, so this works as a decorator."""
        self._listeners.append(listener)
        return listener

    def remove_listener(self, listener: Callable[[P], None]) -> None:
        """Unsubscribe ``listener``; one that is not subscribed is ignored."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_first(self, listener: Callable[[P], None]) -> Callable[[P], None]:
        """Subscribe ``listener`` ahead of every other (the run's journal recorder)."""
        self._listeners.insert(0, listener)
        return listener

    def fire(self, payload: P, *, tally: FailureTally | None = None) -> list[ListenerFailure]:
        """Call every listener with ``payload``; a listener's exception is logged at ERROR
        and returned, for the caller to record, and never stops the others.

        With a ``tally``, a listener's repeated failure is only counted there (logged at
        DEBUG, not returned): the caller records the count once, when the run ends.
        """
        failures = []
        for listener in tuple(self._listeners):  # a listener may remove itself
            try:
                listener(payload)
            except Exception as exc:  # logged and returned: the caller records it
                failure = ListenerFailure(
                    self.name, _name(listener), f"{type(exc).__name__}: {exc}", _where(exc)
                )
                if tally is not None and not tally.first(failure):
                    log.debug("%s (again)", failure.describe())
                    continue
                log.exception("%s", failure.describe())
                failures.append(failure)
        return failures

    def __len__(self) -> int:
        return len(self._listeners)


@dataclass(frozen=True, slots=True)
class HookSpec:
    """A catalogue entry: the payload, who fires the hook and when."""

    payload: type
    emitter: str
    when: str


class RunEvents:
    """The hooks of a command's runs: one :class:`EventHook` per kind of event.

    One object serves every run of a command (a game day passes its own to each
    scenario), so a display subscribes once.
    """

    preflight_started: EventHook[PreflightStarted]
    preflight_done: EventHook[PreflightDone]
    scenario_started: EventHook[ScenarioStarted]
    run_started: EventHook[RunStarted]
    stack_up: EventHook[StackUp]
    phase: EventHook[PhaseEntered]
    status: EventHook[Status]
    fault_applied: EventHook[FaultApplied]
    fault_inject_failed: EventHook[FaultInjectFailed]
    fault_reverted: EventHook[FaultReverted]
    check_evaluated: EventHook[CheckEvaluated]
    abort_tripped: EventHook[AbortTripped]
    scenario_ended: EventHook[ScenarioEnded]
    gameday_ended: EventHook[GameDayEnded]

    def __init__(self) -> None:
        self.preflight_started = EventHook("preflight_started")
        self.preflight_done = EventHook("preflight_done")
        self.scenario_started = EventHook("scenario_started")
        self.run_started = EventHook("run_started")
        self.stack_up = EventHook("stack_up")
        self.phase = EventHook("phase")
        self.status = EventHook("status")
        self.fault_applied = EventHook("fault_applied")
        self.fault_inject_failed = EventHook("fault_inject_failed")
        self.fault_reverted = EventHook("fault_reverted")
        self.check_evaluated = EventHook("check_evaluated")
        self.abort_tripped = EventHook("abort_tripped")
        self.scenario_ended = EventHook("scenario_ended")
        self.gameday_ended = EventHook("gameday_ended")


#: The catalogue, in the order a game day fires them (docs/architecture.md lists it).
HOOKS: dict[str, HookSpec] = {
    "preflight_started": HookSpec(
        PreflightStarted, "game day", "before the preflight of the first scenario's stack"
    ),
    "preflight_done": HookSpec(
        PreflightDone, "game day", "the preflight ended, or was skipped; before any scenario"
    ),
    "scenario_started": HookSpec(ScenarioStarted, "game day", "before each scenario's run"),
    "run_started": HookSpec(
        RunStarted, "engine", "the run's folder exists; before its stack starts"
    ),
    "stack_up": HookSpec(StackUp, "engine", "the stack is up (or the shared one taken)"),
    "phase": HookSpec(PhaseEntered, "engine", "the run enters a phase, after the ledger notes it"),
    "status": HookSpec(Status, "engine", "on each phase change and every sample interval"),
    "fault_applied": HookSpec(FaultApplied, "engine", "a fault took effect on its target"),
    "fault_inject_failed": HookSpec(
        FaultInjectFailed, "engine", "a fault's injection raised; its revert runs next"
    ),
    "fault_reverted": HookSpec(
        FaultReverted, "engine", "a fault's revert ran (or failed), after the ledger says so"
    ),
    "check_evaluated": HookSpec(
        CheckEvaluated, "engine", "a check was judged over a window (abort conditions: when failed)"
    ),
    "abort_tripped": HookSpec(
        AbortTripped, "engine", "an abort condition failed; the run stops and reverts"
    ),
    "scenario_ended": HookSpec(
        ScenarioEnded, "session", "the run's journal is final, before its reports are rendered"
    ),
    "gameday_ended": HookSpec(
        GameDayEnded, "game day", "the scorecard is final (gameday.json), before its pages render"
    ),
}


def _name(listener: Callable[..., object]) -> str:
    return getattr(listener, "__qualname__", None) or repr(listener)


def _where(exc: BaseException) -> str:
    """Where ``exc`` was raised: the last frame of its traceback, as file:line in function."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{Path(last.filename).name}:{last.lineno} in {last.name}"
