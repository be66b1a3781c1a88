"""faultday's vocabulary: every phase, window kind, verdict, section and event kind.

One module, so a report, a test fixture and the engine cannot spell the same
thing two ways (a fixture that repeats the code's wrong word hides the bug).

The **event catalogue** (``CATALOGUE``) documents each event a run's journal can
hold — who emits it, when, and the fields of its ``data`` — in the spirit of
Locust's documented event hooks. Every event carries ``t`` (scenario seconds,
negative before t=0), ``wall`` (Unix time), ``kind``, ``message`` and optionally
``fault`` and ``target``; the fields listed here are the ``data`` keys.
``tests/core/test_vocab.py`` checks every ``event(...)`` call in the package
against this catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    """A run's phases, in order; each is journaled as a ``phase`` event and noted in the ledger."""

    SETUP = "setup"
    STACK_UP = "stack-up"
    WARMUP = "warm-up"  # before t=0: its event carries -warmup
    BASELINE = "baseline"
    FAULTS = "faults"
    RECOVERY = "recovery"
    STEADY = "steady-state"
    REVERT = "revert"
    CHECKS = "checks"
    STACK_DOWN = "stack-down"
    DONE = "done"


class WindowKind(StrEnum):
    """The spans of run time a check judges (``journal.windows[].kind``)."""

    BASELINE = "baseline"
    FAULT = "fault"  # during: a fault's window
    AFTER = "after"  # after: from a fault's end to run end
    RECOVERED = "recovered"  # steady state again, after the last fault + recovery
    RUN = "run"  # the whole run
    ABORT = "abort"  # a sliding window watched by an abort condition


class Verdict(StrEnum):
    """One check's verdict over one window."""

    PASSED = "passed"
    FAILED = "failed"
    INSUFFICIENT = "insufficient"  # too few samples in the window to decide: never a pass
    ERROR = "error"  # the check itself could not run


class RunVerdict(StrEnum):
    """A whole run's verdict."""

    RUNNING = "running"  # only ever seen in a journal whose harness died
    PASSED = "passed"
    FAILED = "failed"
    ABORTED = "aborted"
    ERROR = "error"


class PreflightVerdict(StrEnum):
    """The game day's preflight: a run's verdict, or skipped (``--skip-preflight``)."""

    PASSED = "passed"
    FAILED = "failed"
    ABORTED = "aborted"
    ERROR = "error"
    SKIPPED = "skipped"

    @property
    def lets_the_game_day_start(self) -> bool:
        return self in (PreflightVerdict.PASSED, PreflightVerdict.SKIPPED)


class Section(StrEnum):
    """Where in a scenario a check was declared (``journal.checks[].section``)."""

    STEADY_STATE = "steady_state"  # the hypothesis: judged on baseline and recovered windows
    EXPECT = "expect"  # during/after a fault, or over the whole run
    ABORT = "abort"  # watched live; a failure stops the run
    PREFLIGHT = "preflight"  # `faultday preflight`: the stack checked before a game day


class EventKind(StrEnum):
    """The kinds of journal event; ``CATALOGUE`` says who emits each and its fields."""

    PHASE = "phase"
    ERROR = "error"
    ABORT = "abort"
    FAULT_INJECTED = "fault.injected"
    FAULT_INJECT_FAILED = "fault.inject_failed"
    FAULT_REVERTED = "fault.reverted"
    REVERTS_DONE = "reverts.done"
    SWEEP = "sweep"
    LOAD_STARTED = "load.started"
    LOAD_STOPPED = "load.stopped"
    LOAD_SINK_LOOPBACK = "load.sink_loopback"
    LOAD_JOBS_UNFINISHED = "load.jobs_unfinished"
    LOAD_JOBS_CANCELLED = "load.jobs_cancelled"
    SCRAPE_STARTED = "scrape.started"
    SCRAPE_NONE = "scrape.none"
    SCRAPE_STOPPED = "scrape.stopped"
    TIMESERIES_WRITTEN = "timeseries.written"
    PROCS_STARTED = "procs.started"
    PROCS_STOPPED = "procs.stopped"
    TRACES_COLLECTED = "traces.collected"


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One catalogue entry: who emits the event, when, and its ``data`` fields."""

    emitter: str
    when: str
    fields: tuple[str, ...] = ()
    # Kinds a report draws as a marked line on its charts.
    marked: bool = False


CATALOGUE: dict[EventKind, EventSpec] = {
    EventKind.PHASE: EventSpec(
        "engine", "the run enters a phase (message: the Phase); also noted in the ledger"
    ),
    EventKind.ERROR: EventSpec(
        "engine", "a harness error (message); the run's verdict becomes error", marked=True
    ),
    EventKind.ABORT: EventSpec(
        "engine", "an abort condition failed (message: the reason); reverts follow", marked=True
    ),
    EventKind.FAULT_INJECTED: EventSpec(
        "engine", "a fault took effect (fault, target set)", ("injector",)
    ),
    EventKind.FAULT_INJECT_FAILED: EventSpec(
        "engine", "a fault could not be injected (message: why; fault, target set)", marked=True
    ),
    EventKind.FAULT_REVERTED: EventSpec("engine", "a fault's revert ran (fault, target set)"),
    EventKind.REVERTS_DONE: EventSpec(
        "engine", "every revert of the run has run (message: how long they took)", ("seconds",)
    ),
    EventKind.SWEEP: EventSpec(
        "engine",
        "after stack-down, processes still carrying the run's marker were stopped",
        ("lines",),
    ),
    EventKind.LOAD_STARTED: EventSpec(
        "load (Locust, or load jobs on Kubernetes)",
        "the load generators run (message: workload, users, shape)",
        ("workers", "pids", "namespace", "objects", "sink"),
    ),
    EventKind.LOAD_STOPPED: EventSpec(
        "load",
        "the load generators stopped (message: requests recorded)",
        ("requests", "bad_lines", "max_lag", "mean_lag", "connections", "jobs"),
    ),
    EventKind.LOAD_SINK_LOOPBACK: EventSpec(
        "load jobs (Kubernetes)", "load pods send their events to a loopback sink", ("sink",)
    ),
    EventKind.LOAD_JOBS_UNFINISHED: EventSpec(
        "load jobs (Kubernetes)", "a load job outlived its time and was deleted"
    ),
    EventKind.LOAD_JOBS_CANCELLED: EventSpec(
        "load jobs (Kubernetes)", "the run ended early; the load jobs were deleted"
    ),
    EventKind.SCRAPE_STARTED: EventSpec(
        "metrics scraper", "scraping begins (message: components, interval)", ("components",)
    ),
    EventKind.SCRAPE_NONE: EventSpec("metrics scraper", "a component has no /metrics (target)"),
    EventKind.SCRAPE_STOPPED: EventSpec(
        "metrics scraper",
        "scraping ends (message: rounds)",
        ("rounds", "failures", "max_late", "max_round"),
    ),
    EventKind.TIMESERIES_WRITTEN: EventSpec(
        "time series writer", "timeseries.csv written (message: rows)", ("file", "rows")
    ),
    EventKind.PROCS_STARTED: EventSpec(
        "process sampler (soak)",
        "RSS and open-FD sampling begins (message: components, interval)",
        ("components", "without_pid"),
    ),
    EventKind.PROCS_STOPPED: EventSpec(
        "process sampler (soak)", "sampling ends (message: rounds)", ("rounds", "gone")
    ),
    EventKind.TRACES_COLLECTED: EventSpec(
        "trace capture",
        "the run's spans were copied from the stack's collector into traces.db (message: "
        "how many, dropped, refused)",
        ("spans", "dropped", "rejected", "forwarded"),
    ),
}

# The windows a chart shades as "the stack at rest": before the first fault and after recovery.
STEADY_WINDOWS: frozenset[WindowKind] = frozenset({WindowKind.BASELINE, WindowKind.RECOVERED})
