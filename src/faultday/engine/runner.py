"""The run engine: stack up → warm-up → baseline → faults → recovery → steady → revert → down."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, JsonValue

from faultday import __version__
from faultday.checks.base import check_registry
from faultday.core.clock import Clock
from faultday.core.events import (
    AbortTripped,
    CheckEvaluated,
    EventHook,
    FailureTally,
    FaultApplied,
    FaultInjectFailed,
    FaultReverted,
    PhaseEntered,
    RunEvents,
    RunStarted,
    StackUp,
    Status,
)
from faultday.core.journal import (
    Journal,
    JournalEvent,
    JournalFault,
    JournalWindow,
    RunVerdict,
)
from faultday.core.ledger import Ledger
from faultday.core.protocols import Interruptible, StackDriver
from faultday.core.records import Observations
from faultday.core.scenario import CheckSpec, Fault, Scenario
from faultday.core.spanstore import SpanStore, SpanStoreError
from faultday.core.targets import Revert, Target
from faultday.core.traces import TRACES_NAME, write_traces
from faultday.core.vocab import EventKind, Phase, Section
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind
from faultday.engine.journal_recorder import JournalRecorder
from faultday.engine.participants import Participant, default_participants
from faultday.engine.plan import Plan, make_plan
from faultday.errors import FaultdayError, InjectionError, StackError
from faultday.injectors.base import AnyInjector, injector_registry
from faultday.observe.trace_analysis import analyse
from faultday.observe.trace_capture import TraceCapture
from faultday.scenario.loader import LoadedScenario
from faultday.stack.supervisor import stop_marked_processes

log = logging.getLogger(__name__)

TICK = 0.1  # real seconds between looks at the schedule, abort conditions and stop requests

P = TypeVar("P")


@dataclass(slots=True)
class RunOptions:
    time_scale: float = 1.0
    report_dir: Path = Path("reports")
    base_dir: Path = Path()
    run_dir: Path | None = None  # default: <report_dir>/<timestamp>-<scenario>
    # The hooks the run fires (core/events.py); one object may serve many runs.
    events: RunEvents = field(default_factory=RunEvents)
    participants: list[Participant] | None = None  # None = what the scenario asks for
    # A stack that is already up and outlives this run (game days, the pytest plugin):
    # the run neither starts nor stops it, but still reverts every fault it made.
    shared_stack: StackDriver | None = None
    driver: str = "process"  # a `faultday.drivers` plugin: process, docker, kubernetes
    driver_config: Path | None = None  # the driver's own settings file (e.g. namespace allowlist)


@dataclass(slots=True)
class _ActiveFault:
    fault: Fault
    injector: AnyInjector
    params: BaseModel
    revert: Revert
    injected_at: float


@dataclass(slots=True)
class _FaultCtx:
    """FaultContext for injectors during a live run."""

    run_dir: Path
    stack: StackDriver | None
    hurry: threading.Event
    live: bool = True

    def _up(self) -> StackDriver:
        if self.stack is None:
            raise StackError("the stack is not up")
        return self.stack

    def target(self, name: str) -> Target:
        return self._up().target(name)

    def restart(self, component: str, *, timeout: float) -> None:
        if self.hurry.is_set():
            log.warning("%s: restart skipped (signalled to hurry; the stack goes down)", component)
            return
        try:
            self._up().restart(component, timeout=timeout)
        except StackError:
            if not self.hurry.is_set():
                raise
            # The wait for readiness was cut short on purpose: the stack goes down next.
            log.warning("%s: restart cut short (signalled to hurry)", component)


class Run:
    """One scenario run: the composition root, passed explicitly to every part."""

    def __init__(self, loaded: LoadedScenario, options: RunOptions) -> None:
        self.loaded = loaded
        self.options = options
        self.scenario: Scenario = loaded.scenario
        self.clock = Clock(scale=options.time_scale)
        self.observations = Observations()
        self.plan: Plan = make_plan(self.scenario, time_scale=options.time_scale)
        # Absolute, because components get it on their command line and run elsewhere.
        self.run_dir = (
            options.run_dir or _new_run_dir(options.report_dir, self.scenario.name)
        ).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger.in_dir(self.run_dir)
        self.stack: StackDriver | None = None
        self.events = options.events
        # The journal hears the run through its hooks, like every other listener.
        self.recorder = JournalRecorder(self)
        self._tally = FailureTally()
        # The error a listener's first failure journaled (its place in the errors, its event,
        # its words), by (hook, listener): the end of the run adds how many times it failed.
        self._failed: dict[tuple[str, str], tuple[int, JournalEvent, str]] = {}
        self.phase = Phase.SETUP
        self.active: dict[str, _ActiveFault] = {}
        self.fault_log: dict[str, JournalFault] = {
            f.name: JournalFault(
                name=f.name,
                inject=f.inject,
                target=f.target,
                at=f.at,
                duration=f.duration,
                params=dict(f.with_),
            )
            for f in self.scenario.spec.faults
        }
        self._stop = threading.Event()
        self._stop_reason = ""
        self._hurry = threading.Event()  # a signal during the reverts: skip restart waits
        self.reverting = False  # from the first revert of _finish on: signals never interrupt
        self._lock = threading.Lock()
        self.journal = Journal(
            faultday_version=__version__,
            run_id=self.run_dir.name,
            run_dir=str(self.run_dir),
            scenario_file=str(loaded.file),
            scenario=self.scenario.model_dump(mode="json", by_alias=True),
            title=self.scenario.metadata.title,
            severity=str(self.scenario.metadata.severity),
            runbook=self.scenario.metadata.runbook,
            tags=list(self.scenario.metadata.tags),
            stack_profile=self.scenario.spec.stack,
            time_scale=options.time_scale,
            duration=self.scenario.spec.duration,
            started=time.time(),
            windows=[
                JournalWindow(kind=w.kind, label=w.label, start=w.start, end=w.end, fault=w.fault)
                for w in self.plan.windows
            ],
        )
        self.journal.write(self.run_dir)
        self.participants: list[Participant] = (
            options.participants
            if options.participants is not None
            else default_participants(self.scenario)
        )
        self._started_participants: list[Participant] = []
        # Checks that probe the live stack are judged when their window closes.
        self._live_results: dict[int, CheckResult] = {}
        self.injectors = injector_registry()
        self.checks = check_registry()

    # ---- RunView for participants -------------------------------------------------
    def endpoints(self) -> dict[str, str]:
        return self.stack.endpoints() if self.stack is not None else {}

    def target(self, name: str) -> Target:
        if self.stack is None:
            raise StackError("the stack is not up")
        return self.stack.target(name)

    def event(self, kind: str, message: str = "", **data: object) -> None:
        self._append_event(kind, message, self._event_time(), data)

    def at(self, t: float) -> _EventsAt:
        """The journal's events as of scenario time ``t`` (a hook's payload says when)."""
        return _EventsAt(self, t)

    def _append_event(
        self, kind: str, message: str, t: float, data: dict[str, object]
    ) -> JournalEvent:
        fault = data.pop("fault", None)
        target = data.pop("target", None)
        ev = JournalEvent(
            t=t,
            wall=time.time(),
            kind=kind,
            message=message,
            fault=str(fault) if fault else None,
            target=str(target) if target else None,
            data={k: _jsonable(v) for k, v in data.items()},
        )
        with self._lock:
            self.journal.events.append(ev)
        log.info("%s %s", kind, message)
        return ev

    def _event_time(self) -> float:
        """Scenario time of an event now: never after t=0 while the run is still before it."""
        if self.phase in (Phase.SETUP, Phase.STACK_UP):
            return -self.scenario.spec.warmup  # the clock is not armed yet: warm-up's start
        now = round(self.clock.now(), 4)
        # The clock restarts at the end of warm-up; a warm-up event stamped a few ms late
        # must not land after the baseline's first events.
        return min(now, 0.0) if self.phase == Phase.WARMUP else now

    def error(self, message: str) -> None:
        log.error("%s", message)
        with self._lock:
            self.journal.errors.append(message)
        self.event(EventKind.ERROR, message)

    def _fire(self, hook: EventHook[P], payload: P) -> None:
        """Fire a hook; a listener that raised is journaled as an error (the verdict becomes
        error) and never interrupts the run or a revert. Its repeats are only counted: the
        end of the run adds the count to that one error (``_note_repeats``)."""
        for failure in hook.fire(payload, tally=self._tally):
            said = failure.describe()
            with self._lock:
                self.journal.errors.append(said)
                index = len(self.journal.errors) - 1
            ev = self._append_event(EventKind.ERROR, said, self._event_time(), {})
            self._failed[failure.hook, failure.listener] = (index, ev, said)

    def _note_repeats(self) -> None:
        """Say on each listener's one journaled error how many times it failed in the run."""
        for (hook, listener), (index, ev, said) in self._failed.items():
            n = self._tally.count(hook, listener)
            if n < 2:
                continue
            noted = f"{said}; failed {n} times in this run"
            if self.journal.reason == self.journal.errors[index]:
                self.journal.reason = noted
            self.journal.errors[index] = ev.message = noted

    def fire_after_end(self, hook: EventHook[P], payload: P) -> None:
        """Fire a hook once the run is over (``scenario_ended``): a listener's failure is
        journaled, the verdict becomes error and the journal is written again."""
        before = len(self.journal.errors)
        self._fire(hook, payload)
        if len(self.journal.errors) == before:
            return
        if self.journal.verdict in (RunVerdict.PASSED, RunVerdict.FAILED):
            self.journal.verdict = RunVerdict.ERROR
            self.journal.reason = self.journal.errors[before]
        self.journal.write(self.run_dir)

    def request_stop(self, reason: str) -> None:
        """Ask the run to stop: reverts run, verdict aborted (safe from a signal handler)."""
        self._stop_reason = self._stop_reason or reason
        self._stop.set()
        if self.phase == Phase.STACK_UP and self.options.shared_stack is None:
            self._interrupt_stack()  # a stack still starting gives up its waits now

    def hurry(self) -> None:
        """Skip the waits for restarts in the reverts still to run (a signal during them)."""
        self._hurry.set()
        self._interrupt_stack()

    def _interrupt_stack(self) -> None:
        # Only the process driver can cut its waits short; the others finish theirs.
        if isinstance(self.stack, Interruptible) and self.options.shared_stack is None:
            self.stack.interrupt()

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    # ---- the phases ---------------------------------------------------------------
    def execute(self, stack_factory: Callable[[Run], StackDriver]) -> Journal:
        """Run every phase; always revert, stop the stack and write the journal."""
        self.recorder.subscribe(self.events)
        try:
            self._fire(
                self.events.run_started,
                RunStarted(self.scenario.name, self.journal.run_id, self.run_dir),
            )
            self._set_phase(Phase.STACK_UP)
            self._check_stop()
            if self.options.shared_stack is not None:
                self.stack = self.options.shared_stack
            else:
                self.stack = stack = stack_factory(self)
                stack.up()
            self._check_stop()
            self._stack_up()
            self._describe_stack()
            self._start_participants()
            self._check_stop()
            self._warmup()
            self._timeline()
        except _Stopped:
            self._fail(RunVerdict.ABORTED, self._stop_reason or "stopped")
        except StackError as exc:
            if self._stop.is_set():  # a start-up cut short by the stop that was asked for
                self._fail(RunVerdict.ABORTED, self._stop_reason or "stopped")
            else:
                self._fail(RunVerdict.ERROR, f"stack error: {exc}")
        except FaultdayError as exc:
            self._fail(RunVerdict.ERROR, str(exc))
        except KeyboardInterrupt:
            self._fail(RunVerdict.ABORTED, "interrupted")
        except Exception as exc:
            log.exception("harness error")
            self._fail(RunVerdict.ERROR, f"harness error: {type(exc).__name__}: {exc}")
        finally:
            try:
                self._finish()
            finally:  # the hooks outlive the run: the next run's journal is another
                self.recorder.unsubscribe(self.events)
        return self.journal

    def _set_phase(self, phase: Phase) -> None:
        self.phase = phase
        try:
            self.ledger.note_phase(str(phase))
        except OSError as exc:  # a full disk must not stop the reverts that follow
            log.error("cannot note phase %s in the ledger: %s", phase, exc)  # noqa: TRY400
        self._fire(self.events.phase, PhaseEntered(phase, self._event_time()))
        self._status()

    def _stack_up(self) -> None:
        if self.stack is None:
            return
        shared = self.options.shared_stack is not None
        self._fire(self.events.stack_up, StackUp(self.stack.driver, shared, self.stack.run_dir))

    def _status(self) -> None:
        if not self.events.status:
            return  # nobody shows it: no need to count the requests
        reqs = self.observations.requests
        self._fire(
            self.events.status,
            Status(
                phase=self.phase,
                t=self.clock.now()
                if self.phase not in (Phase.SETUP, Phase.STACK_UP, Phase.WARMUP)
                else 0.0,
                duration=self.scenario.spec.duration,
                active_faults=tuple(self.active),
                requests=len(reqs),
                errors=sum(1 for r in reqs if not r.ok),
            ),
        )

    def _describe_stack(self) -> None:
        if self.stack is None:
            return
        try:
            self.journal.stack = self.stack.describe().model_dump(mode="json")
            self.journal.components = dict(self.stack.versions())
        except Exception as exc:  # noqa: BLE001 - for the report only; logged and journaled
            self.error(f"could not describe the stack: {exc}")

    def _start_participants(self) -> None:
        for p in self.participants:
            p.start(self)
            self._started_participants.append(p)

    def _warmup(self) -> None:
        # Warm-up happens before t=0, so it is not compressed differently: it is scenario time too.
        end = time.monotonic() + self.scenario.spec.warmup * self.options.time_scale
        # t=0 is the end of warm-up: events during it carry negative scenario times. The clock
        # is set before the phase event, so the timeline shows warm-up at -warmup, before t=0.
        self.clock.t0_mono = end
        self.clock.t0_wall = time.time() + (end - time.monotonic())
        self._set_phase(Phase.WARMUP)
        while time.monotonic() < end:
            if self._stop.is_set():
                raise _Stopped
            time.sleep(min(TICK, max(0.0, end - time.monotonic())))

    def _timeline(self) -> None:
        spec = self.scenario.spec
        self.clock.start()
        self.journal.t0_wall = self.clock.t0_wall
        self._set_phase(Phase.BASELINE if spec.faults else Phase.STEADY)
        schedule = self.plan.schedule()
        live = self._live_evaluations()
        next_abort = 0.0
        # Live probes run on their own threads so a slow answer never delays the schedule.
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="live-check") as pool:
            futures: dict[int, Future[CheckResult]] = {}
            while True:
                now = self.clock.now()
                if self._stop.is_set():
                    raise _Stopped
                while live and (live[0][0] <= now or now >= spec.duration):
                    _, i, check, window = live.pop(0)
                    futures[i] = pool.submit(self._evaluate_live, check, window)
                while schedule and schedule[0][0] <= now:
                    _, action, name = schedule.pop(0)
                    self._do(action, name)
                self._update_phase(now)
                if now >= next_abort:
                    next_abort = now + spec.load.sample_interval
                    self._watch_aborts(now)
                    self._status()
                if now >= spec.duration and not schedule and not live:
                    break
                nxt = min(
                    schedule[0][0] if schedule else spec.duration,
                    live[0][0] if live else spec.duration,
                    next_abort,
                )
                self.clock.sleep_until(nxt, cap=TICK)
            for i, fut in futures.items():
                self._live_results[i] = fut.result()

    def _update_phase(self, now: float) -> None:
        want = self.plan.phase_at(now)
        if want != self.phase:
            self._set_phase(want)

    def _do(self, action: str, name: str) -> None:
        fault = next(f for f in self.scenario.spec.faults if f.name == name)
        if action == "inject":
            self._inject(fault)
        elif name in self.active:
            self._revert_one(self.active.pop(name))

    def _inject(self, fault: Fault) -> None:
        injector = self.injectors.get(fault.inject)()
        params = injector.parse(fault.with_)
        target = self.target(fault.target)
        ctx = _FaultCtx(run_dir=self.run_dir, stack=self.stack, hurry=self._hurry)
        revert = injector.prepare(ctx, target, params, fault=fault.name)
        self.ledger.add_revert(revert)  # on disk before the fault acts: recover can undo it
        entry = self.fault_log[fault.name]
        try:
            injector.inject(ctx, target, params, revert)
        except Exception as exc:
            entry.error = str(exc)
            self._fire(
                self.events.fault_inject_failed,
                FaultInjectFailed(
                    fault.name, fault.inject, fault.target, round(self.clock.now(), 4), str(exc)
                ),
            )
            self._revert_one(_ActiveFault(fault, injector, params, revert, self.clock.now()))
            raise InjectionError(
                f"fault {fault.name!r} ({fault.inject} on {fault.target}): {exc}"
            ) from exc
        now = self.clock.now()
        entry.injected_at = round(now, 4)
        self._fire(
            self.events.fault_applied,
            FaultApplied(fault.name, fault.inject, fault.target, round(now, 4)),
        )
        active = _ActiveFault(fault, injector, params, revert, now)
        if fault.duration is None or injector.one_shot:
            self._revert_one(active)  # one-shot: undo (e.g. restart) right away
        else:
            self.active[fault.name] = active

    def _revert_one(self, active: _ActiveFault) -> bool:
        ctx = _FaultCtx(run_dir=self.run_dir, stack=self.stack, hurry=self._hurry)
        entry = self.fault_log[active.fault.name]
        try:
            active.injector.revert(ctx, active.revert)
        except Exception as exc:  # noqa: BLE001 - journaled; the other reverts still run
            self.ledger.revert_done(active.revert, ok=False, error=str(exc))
            entry.revert_ok = False
            entry.error = entry.error or f"revert failed: {exc}"
            self._fire_reverted(active, ok=False, error=str(exc))
            return False
        self.ledger.revert_done(active.revert, ok=True)
        entry.reverted_at = round(self.clock.now(), 4)
        entry.revert_ok = True
        self._fire_reverted(active, ok=True)
        return True

    def _fire_reverted(self, active: _ActiveFault, *, ok: bool, error: str = "") -> None:
        f = active.fault
        t = round(self.clock.now(), 4)
        self._fire(
            self.events.fault_reverted, FaultReverted(f.name, f.inject, f.target, t, ok, error)
        )

    def revert_all(self) -> None:
        """Undo every fault still outstanding in the ledger, last in first out."""
        by_id = {a.revert.id: a for a in self.active.values()}
        for revert in self.ledger.outstanding_reverts():
            active = by_id.get(revert.id)
            if active is not None:
                self.active.pop(active.fault.name, None)
                self._revert_one(active)
                continue
            # Reverts recorded in the ledger whose fault raised halfway through inject.
            injector = self.injectors.get(revert.injector)()
            fault = next(f for f in self.scenario.spec.faults if f.name == revert.fault)
            self._revert_one(
                _ActiveFault(fault, injector, injector.parse(fault.with_), revert, 0.0)
            )

    def _watch_aborts(self, now: float) -> None:
        for spec in self.scenario.spec.abort:
            span = spec.for_ or self.scenario.spec.load.sample_interval
            window = Window(WindowKind.ABORT, f"last {span:g}s", max(0.0, now - span), now)
            if window.length < span * 0.999:
                continue  # not yet a full window to judge
            result = self._evaluate(spec, window)
            if result.verdict == Verdict.FAILED:
                self._record_check(Section.ABORT, spec, result)
                reason = f"abort condition tripped: {result.describe()}"
                self._fire(self.events.abort_tripped, AbortTripped(reason, spec.check, now))
                self.request_stop(reason)

    # ---- checks -------------------------------------------------------------------
    def _evaluate(self, spec: CheckSpec, window: Window) -> CheckResult:
        try:
            check = self.checks.get(spec.check)()
            params = check.parse(spec.params)
            return check.evaluate(self, params, window)
        except Exception as exc:
            log.exception("check %s failed to evaluate", spec.check)
            return CheckResult(
                spec.check, spec.label, window.label, Verdict.ERROR, message=str(exc)
            )

    def _evaluate_live(self, spec: CheckSpec, window: Window) -> CheckResult:
        """A probe of the live stack; one that ends after its window says nothing about it."""
        result = self._evaluate(spec, window)
        late = self.clock.now() - window.end
        if late > 0 and result.verdict in (Verdict.PASSED, Verdict.FAILED):
            return dataclasses.replace(
                result,
                verdict=Verdict.INSUFFICIENT,
                message=f"the probe ended {late:.2f}s after its window (machine overloaded?)",
            )
        return result

    def _record_check(self, section: Section, spec: CheckSpec, result: CheckResult) -> None:
        """Announce a check's result; the journal recorder adds it to the journal's checks."""
        self._fire(
            self.events.check_evaluated,
            CheckEvaluated(
                section,
                result.check,
                result.label,
                result.window,
                result.verdict,
                result.expected,
                result.observed,
                n=result.n,
                message=result.message,
                params=dict(spec.params),
            ),
        )

    def _live_evaluations(self) -> list[tuple[float, int, CheckSpec, Window]]:
        out = []
        for i, (_, spec, window) in enumerate(self.plan.evaluations(self.scenario)):
            if spec.check in self.checks and self.checks.get(spec.check).live:
                # Probes are taken mid-window: faults in it have settled and are still in
                # place, and a slow answer does not run into the revert at the window's end.
                out.append(((window.start + window.end) / 2, i, spec, window))
        return sorted(out, key=lambda x: (x[0], x[1]))

    def _run_checks(self) -> None:
        for i, (section, spec, window) in enumerate(self.plan.evaluations(self.scenario)):
            result = self._live_results.get(i) or self._evaluate(spec, window)
            self._record_check(section, spec, result)

    # CheckContext
    def fault_times(self, fault: str) -> tuple[float, float]:
        entry = self.fault_log[fault]
        start = entry.injected_at if entry.injected_at is not None else entry.at
        end = entry.reverted_at if entry.reverted_at is not None else float("inf")
        return start, end

    @property
    def time_scale(self) -> float:
        return self.options.time_scale

    # ---- the end ------------------------------------------------------------------
    def _fail(self, verdict: RunVerdict, reason: str) -> None:
        if self.journal.verdict in (RunVerdict.RUNNING, RunVerdict.PASSED):
            self.journal.verdict = verdict
            self.journal.reason = reason
        if verdict == RunVerdict.ERROR:
            self.error(reason)
        else:
            self.event(EventKind.ABORT, reason)

    def _finish(self) -> None:
        self.reverting = True  # first: from here on a signal never raises into a revert
        if self._stop.is_set() and self.journal.verdict == RunVerdict.RUNNING:
            self._fail(RunVerdict.ABORTED, self._stop_reason or "stopped")
        reverted_at = time.monotonic()
        self._set_phase(Phase.REVERT)
        self.revert_all()
        self.event(
            EventKind.REVERTS_DONE,
            f"{time.monotonic() - reverted_at:.3f}s",
            seconds=round(time.monotonic() - reverted_at, 4),
        )
        for p in reversed(self._started_participants):
            try:
                p.stop()
            except Exception as exc:  # noqa: BLE001 - journaled; fails the run
                self.error(f"participant {p.name} failed to stop: {exc}")
        if self.journal.verdict == RunVerdict.RUNNING:
            self._set_phase(Phase.CHECKS)
            self._run_checks()
        self._set_phase(Phase.STACK_DOWN)
        if self.stack is not None and self.options.shared_stack is None:
            try:
                self.stack.down()
            except Exception as exc:  # noqa: BLE001 - journaled; fails the run
                self.error(f"stack down failed: {exc}")
        self._sweep()
        self._analyse_traces()
        self.journal.faults = list(self.fault_log.values())
        self.journal.verdict = self._verdict()
        self.journal.ended = time.time()
        self._set_phase(Phase.DONE)
        self.recorder.unsubscribe(self.events)
        self._note_repeats()
        self.journal.write(self.run_dir)

    def _analyse_traces(self) -> None:
        """``traces.json``: where the time went, per window and hop (observe/trace_analysis)."""
        captured = next(
            (p.captured for p in self.participants if isinstance(p, TraceCapture)), None
        )
        if captured is None or self.journal.t0_wall is None:
            return  # no collector in the stack, tracing off, or the run never reached t=0
        try:
            with SpanStore(captured.db) as store:
                spans = store.read(limit=captured.max_spans)
            summary = analyse(
                spans,
                self.journal.windows,
                self.observations.requests,
                t0_wall=self.journal.t0_wall,
                time_scale=self.options.time_scale,
                dropped=captured.dropped,
                rejected=captured.rejected,
            )
            write_traces(self.run_dir, summary)
        except (SpanStoreError, OSError, ValueError) as exc:
            self.error(f"the run's traces could not be analysed: {exc}")
            return
        self.journal.artifacts["traces"] = TRACES_NAME
        self.journal.artifacts["traces.db"] = captured.db.name

    def _sweep(self) -> None:
        """Stop anything still carrying this run's marker: nothing the run started outlives it.

        Normally nothing: the stack and the load stopped what they started. A process
        spawned while a signal cut a start-up short, or one that left its group, is
        found here by its marker and stopped (and the sweep is journaled).
        """
        done = stop_marked_processes(self.ledger)
        if done.messages:
            log.warning("stopped leftovers of the run: %s", "; ".join(done.messages))
            self.event(
                EventKind.SWEEP, f"{done.stopped} leftover processes stopped", lines=done.messages
            )
        if done.failed:
            self.error(f"{done.failed} processes of the run could not be stopped")

    def _verdict(self) -> RunVerdict:
        if self.journal.verdict not in (RunVerdict.RUNNING, RunVerdict.PASSED):
            return self.journal.verdict
        if self.journal.errors:
            self.journal.reason = self.journal.errors[0]
            return RunVerdict.ERROR
        bad = [c for c in self.journal.checks if c.verdict != Verdict.PASSED]
        if bad:
            self.journal.reason = f"{len(bad)} of {len(self.journal.checks)} checks did not pass"
            return RunVerdict.FAILED
        n = len(self.journal.checks)
        self.journal.reason = "the one check passed" if n == 1 else f"all {n} checks passed"
        return RunVerdict.PASSED


@dataclass(frozen=True, slots=True)
class _EventsAt:
    """A run's journal events stamped with a time given, not the time they are written."""

    run: Run
    t: float

    def event(self, kind: str, message: str = "", **data: object) -> None:
        self.run._append_event(kind, message, self.t, data)


class _Stopped(FaultdayError):
    """Raised inside the timeline when a stop was requested (abort or signal)."""


def _new_run_dir(report_dir: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    base = report_dir / f"{stamp}-{name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _jsonable(value: object) -> JsonValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
