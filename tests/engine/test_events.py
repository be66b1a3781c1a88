"""The run event catalogue (core/events.py) on real runs of the engine tests' stack of plain
processes: the order a run fires its hooks in, and a listener that raises being logged and
journaled while the run completes and every fault is reverted."""

from __future__ import annotations

import functools
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from faultday.core.events import (
    HOOKS,
    AbortTripped,
    CheckEvaluated,
    EventHook,
    FailureTally,
    FaultApplied,
    FaultInjectFailed,
    FaultReverted,
    PhaseEntered,
    RunEvents,
    ScenarioEnded,
    Status,
)
from faultday.core.journal import Journal, RunVerdict
from faultday.core.protocols import FaultContext
from faultday.core.targets import Revert, Target
from faultday.core.vocab import EventKind, Phase, Section
from faultday.engine.journal_recorder import JournalRecorder
from faultday.errors import InjectionError
from faultday.gameday import run_gameday
from faultday.injectors.base import NoParams
from faultday.injectors.process import ProcessPause
from faultday.scenario.loader import load_scenario
from faultday.session import Settings, run_scenario

DATA = Path(__file__).parent / "data"
SCALE = 0.5  # the 6 s scenario in 3 s; its windows are as written
# The checks' verdicts are not what these tests judge: a mid-window probe on a busy machine
# may end after its 0.5 s window (insufficient, so failed).
COMPLETED = (RunVerdict.PASSED, RunVerdict.FAILED)


@dataclass
class Recorder:
    """Every payload of every hook, in the order fired."""

    seen: list[tuple[str, object]] = field(default_factory=list)

    def listen(self, events: RunEvents) -> None:
        for name in HOOKS:
            hook: EventHook[object] = getattr(events, name)
            hook.add_listener(functools.partial(self.hear, name))

    def hear(self, name: str, payload: object) -> None:
        self.seen.append((name, payload))

    def as_journal(self) -> list[tuple[str, str, str | None]]:
        """The journal events the hooks fired so far stand for: (kind, message, fault)."""
        out: list[tuple[str, str, str | None]] = []
        for _, p in self.seen:
            if isinstance(p, PhaseEntered):
                out.append((EventKind.PHASE, str(p.phase), None))
            elif isinstance(p, FaultApplied):
                out.append((EventKind.FAULT_INJECTED, f"{p.injector} on {p.target}", p.fault))
            elif isinstance(p, FaultInjectFailed):
                out.append((EventKind.FAULT_INJECT_FAILED, p.error, p.fault))
            elif isinstance(p, FaultReverted) and p.ok:
                out.append((EventKind.FAULT_REVERTED, f"{p.injector} on {p.target}", p.fault))
        return out

    def names(self) -> list[str]:
        """The hooks fired, a phase shown as ``phase:<phase>``; status ticks left out."""
        out = []
        for name, payload in self.seen:
            if isinstance(payload, PhaseEntered):
                out.append(f"phase:{payload.phase}")
            elif isinstance(payload, FaultApplied | FaultReverted):
                out.append(f"{name}:{payload.fault}")
            elif not isinstance(payload, Status | CheckEvaluated):
                out.append(name)
        return out


def _suite(tmp: Path) -> Path:
    for name in ("procs.stack.yaml", "pause.scenario.yaml"):
        shutil.copy(DATA / name, tmp / name)
    return tmp / "pause.scenario.yaml"


def _run(tmp: Path, events: RunEvents) -> Journal:
    loaded = load_scenario(_suite(tmp))
    settings = Settings(report_dir=tmp / "reports", base_dir=tmp, time_scale=SCALE)
    return run_scenario(loaded, settings=settings, events=events).journal


def _ledger(journal: Journal) -> list[dict[str, Any]]:
    text = (Path(journal.run_dir) / "ledger.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


RUN_ORDER = [
    "run_started",
    f"phase:{Phase.STACK_UP}",
    "stack_up",
    f"phase:{Phase.WARMUP}",
    f"phase:{Phase.BASELINE}",
    "fault_applied:freeze",  # at 1 s: the fault first, then the phase it opens
    f"phase:{Phase.FAULTS}",
    "fault_applied:freeze-web",
    "fault_reverted:freeze-web",
    "fault_reverted:freeze",
    f"phase:{Phase.RECOVERY}",
    f"phase:{Phase.STEADY}",
    f"phase:{Phase.REVERT}",
    f"phase:{Phase.CHECKS}",
    f"phase:{Phase.STACK_DOWN}",
    f"phase:{Phase.DONE}",
    "scenario_ended",
]


@pytest.mark.usefixtures("no_leftovers")
def test_a_run_fires_its_hooks_in_the_order_things_happen(tmp_path: Path) -> None:
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    journal = _run(tmp_path, events)
    assert journal.verdict in COMPLETED and not journal.errors, journal.reason
    assert rec.names() == RUN_ORDER
    # Each check is announced as the journal records it, between the checks and stack-down.
    names = [n for n, _ in rec.seen]
    checks = [p for n, p in rec.seen if isinstance(p, CheckEvaluated)]
    first, last = names.index("check_evaluated"), len(names) - names[::-1].index("check_evaluated")
    phases = [p.phase for _, p in rec.seen[:first] if isinstance(p, PhaseEntered)]
    assert phases[-1] == Phase.CHECKS
    after_checks = rec.seen[last][1]
    assert isinstance(after_checks, PhaseEntered) and after_checks.phase == Phase.STACK_DOWN
    assert [(c.check, c.window, str(c.verdict)) for c in checks] == [
        (c.check, c.window, c.verdict) for c in journal.checks
    ]
    # The payloads agree with the journal: fault times, the run folder, the final journal.
    applied = {p.fault: p for _, p in rec.seen if isinstance(p, FaultApplied)}
    for f in journal.faults:
        assert applied[f.name].t == f.injected_at and applied[f.name].target == f.target
    reverted = [p for _, p in rec.seen if isinstance(p, FaultReverted)]
    assert all(p.ok for p in reverted) and len(reverted) == 2
    ended = rec.seen[-1][1]
    assert isinstance(ended, ScenarioEnded) and ended.journal is journal
    assert ended.run_dir == Path(journal.run_dir)
    # The live display's ticks: one per phase at least, each with the run's duration.
    ticks = [p for _, p in rec.seen if isinstance(p, Status)]
    assert len(ticks) >= len(RUN_ORDER) - 5 and {t.duration for t in ticks} == {6.0}


@pytest.mark.usefixtures("no_leftovers")
def test_the_journal_records_what_the_hooks_fired_in_the_same_order(tmp_path: Path) -> None:
    """The journal is a subscriber: its phase and fault events and its checks are the hooks'
    payloads, one for one and in order, and it leaves the hooks when the run ends."""
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    journal = _run(tmp_path, events)
    assert journal.verdict in COMPLETED and not journal.errors, journal.reason
    kinds = {kind for kind, _, _ in rec.as_journal()} | {EventKind.FAULT_INJECT_FAILED}
    written = [(e.kind, e.message, e.fault) for e in journal.events if e.kind in kinds]
    assert written == rec.as_journal()
    assert len(written) == len(RUN_ORDER) - 3  # all but run_started, stack_up, scenario_ended
    # A phase's event carries the time its hook said; a fault's, the fault's target.
    phases = [p for _, p in rec.seen if isinstance(p, PhaseEntered)]
    assert [e.t for e in journal.events if e.kind == EventKind.PHASE] == [p.t for p in phases]
    injected = [e for e in journal.events if e.kind == EventKind.FAULT_INJECTED]
    assert [(e.target, e.data) for e in injected] == [
        (p.target, {"injector": p.injector}) for _, p in rec.seen if isinstance(p, FaultApplied)
    ]
    checks = [p for _, p in rec.seen if isinstance(p, CheckEvaluated)]
    assert checks and [
        (c.section, c.check, c.label, c.window, c.verdict, c.expected, c.observed, c.n)
        for c in journal.checks
    ] == [
        (c.section, c.check, c.label, c.window, c.verdict, c.expected, c.observed, c.n)
        for c in checks
    ]
    assert [(c.message, c.params) for c in journal.checks] == [
        (c.message, dict(c.params)) for c in checks
    ]
    # What the other hooks do not stand for is still there, where it happened.
    all_kinds = [e.kind for e in journal.events]
    assert all_kinds.index(EventKind.REVERTS_DONE) > all_kinds.index(EventKind.FAULT_REVERTED)
    # The journal left the hooks with the run: only the test's own listener is on each.
    assert {name: len(getattr(events, name)) for name in HOOKS} == dict.fromkeys(HOOKS, 1)


@pytest.mark.usefixtures("no_leftovers")
def test_an_abort_fires_abort_tripped_after_its_check_and_every_applied_fault_is_reverted(
    tmp_path: Path,
) -> None:
    # web serves its folder, where /missing answers 404: the abort trips once the freeze acts.
    text = (DATA / "pause.scenario.yaml").read_text() + (
        "  abort:\n    - {check: health, target: web, path: /missing, status: 200, for: 1.5s}\n"
    )
    path = _suite(tmp_path)
    path.write_text(text)
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    loaded = load_scenario(path)
    settings = Settings(report_dir=tmp_path / "reports", base_dir=tmp_path, time_scale=SCALE)
    journal = run_scenario(loaded, settings=settings, events=events).journal
    assert journal.verdict == RunVerdict.ABORTED, journal.reason
    names = [n for n, _ in rec.seen]
    assert names.count("abort_tripped") == 1
    i = names.index("abort_tripped")
    before, tripped = rec.seen[i - 1][1], rec.seen[i][1]
    assert isinstance(before, CheckEvaluated) and before.section == Section.ABORT
    assert isinstance(tripped, AbortTripped) and tripped.check == "health"
    assert tripped.reason == journal.reason and tripped.t >= 1.5
    after = rec.names()[rec.names().index("abort_tripped") :]
    assert after[1] == f"phase:{Phase.REVERT}" and after[-1] == "scenario_ended"
    applied = {p.fault for _, p in rec.seen if isinstance(p, FaultApplied)}
    reverted = {p.fault for _, p in rec.seen if isinstance(p, FaultReverted) and p.ok}
    assert "freeze" in applied and applied == reverted


def _boom(payload: object) -> None:
    raise RuntimeError(f"boom on {type(payload).__name__}")


@pytest.mark.usefixtures("no_leftovers")
def test_a_listener_that_raises_is_logged_and_journaled_and_the_run_still_reverts_everything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events = RunEvents()
    raising = ("run_started", "stack_up", "phase", "status", "fault_applied", "fault_reverted")
    for name in (*raising, "check_evaluated", "scenario_ended"):
        getattr(events, name).add_listener(_boom)
    rec = Recorder()
    rec.listen(events)  # after the raising ones: it is still called
    with caplog.at_level(logging.ERROR, logger="faultday.core.events"):
        journal = _run(tmp_path, events)
    # The run went through every phase and reverted every fault, on time.
    assert rec.names() == RUN_ORDER
    assert all(f.revert_ok for f in journal.faults), journal.faults
    ledger = _ledger(journal)
    reverts = {x["revert"]["id"] for x in ledger if x["op"] == "revert"}
    done = {x["id"] for x in ledger if x["op"] == "done" and x["ok"]}
    assert reverts == done and len(reverts) == 2
    # Every failure was logged at ERROR and journaled; the verdict says so.
    assert journal.verdict == RunVerdict.ERROR
    failed_hooks = {e.split(" of ", 1)[1].split(" failed")[0] for e in journal.errors}
    assert failed_hooks == {*raising, "check_evaluated", "scenario_ended"}
    assert any(
        "fault_reverted failed: RuntimeError: boom on FaultReverted" in e for e in journal.errors
    )
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == len(journal.errors) and all(r.exc_info for r in logged)
    # The journal on disk has them too (scenario_ended's, fired after the run, as well).
    on_disk = json.loads((Path(journal.run_dir) / "journal.json").read_text())
    assert on_disk["verdict"] == "error" and on_disk["errors"] == journal.errors
    assert "scenario_ended" in on_disk["errors"][-1]


@pytest.mark.usefixtures("no_leftovers")
def test_a_status_listener_that_keeps_failing_is_one_journal_error_with_its_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events = RunEvents()
    events.status.add_listener(_boom)  # raises on every tick
    rec = Recorder()
    rec.listen(events)
    with caplog.at_level(logging.ERROR, logger="faultday.core.events"):
        journal = _run(tmp_path, events)
    ticks = sum(isinstance(p, Status) for _, p in rec.seen)
    assert ticks > len(RUN_ORDER) - 5  # it failed many times …
    # … and the journal says so once, with where it was raised and how many times.
    assert len(journal.errors) == 1, journal.errors
    (error,) = journal.errors
    assert error.startswith(
        "event listener _boom of status failed: RuntimeError: boom on Status (at test_events.py:"
    )
    assert error.endswith(f" in _boom); failed {ticks} times in this run")
    assert [e.message for e in journal.events if e.kind == EventKind.ERROR] == [error]
    assert journal.verdict == RunVerdict.ERROR and journal.reason == error
    on_disk = json.loads((Path(journal.run_dir) / "journal.json").read_text())
    assert on_disk["errors"] == [error] and on_disk["verdict"] == "error"
    # Logged once at ERROR with its traceback, not once per tick.
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1 and logged[0].exc_info
    assert all(f.revert_ok for f in journal.faults)


@pytest.mark.usefixtures("no_leftovers")
def test_a_journal_recorder_that_fails_is_an_error_and_every_fault_is_still_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: JournalRecorder, p: FaultReverted) -> None:
        raise OSError(f"journal unwritable for {p.fault}")

    monkeypatch.setattr(JournalRecorder, "fault_reverted", broken)
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    journal = _run(tmp_path, events)
    assert rec.names() == RUN_ORDER  # every listener after it still heard each revert
    assert all(f.revert_ok for f in journal.faults), journal.faults
    ledger = _ledger(journal)
    reverts = {x["revert"]["id"] for x in ledger if x["op"] == "revert"}
    assert reverts == {x["id"] for x in ledger if x["op"] == "done" and x["ok"]}
    assert journal.verdict == RunVerdict.ERROR
    assert ".broken of fault_reverted failed: OSError: journal unwritable for" in journal.errors[0]
    assert len(journal.errors) == 1 and "failed 2 times in this run" in journal.errors[0]
    assert EventKind.FAULT_REVERTED not in {e.kind for e in journal.events}


@pytest.mark.usefixtures("no_leftovers")
def test_a_fault_that_cannot_be_injected_fires_its_hook_and_the_journal_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ProcessPause.inject

    def refuses_web(
        self: ProcessPause, ctx: FaultContext, target: Target, params: NoParams, revert: Revert
    ) -> None:
        if revert.fault == "freeze-web":
            raise InjectionError("web: refused for the test")
        real(self, ctx, target, params, revert)

    monkeypatch.setattr(ProcessPause, "inject", refuses_web)
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    journal = _run(tmp_path, events)
    failed = [p for _, p in rec.seen if isinstance(p, FaultInjectFailed)]
    assert [(p.fault, p.injector, p.target, p.error) for p in failed] == [
        ("freeze-web", "process_pause", "web", "web: refused for the test")
    ]
    # Its revert runs at once; the run stops with an error and reverts what is still active.
    names = rec.names()
    i = names.index("fault_inject_failed")
    assert names[i - 2 : i + 2] == [
        "fault_applied:freeze",
        f"phase:{Phase.FAULTS}",
        "fault_inject_failed",
        "fault_reverted:freeze-web",
    ]
    assert names[i + 2 :] == [
        f"phase:{Phase.REVERT}",
        "fault_reverted:freeze",
        f"phase:{Phase.STACK_DOWN}",
        f"phase:{Phase.DONE}",
        "scenario_ended",
    ]
    kinds = {EventKind.PHASE, EventKind.FAULT_INJECTED, EventKind.FAULT_INJECT_FAILED}
    kinds |= {EventKind.FAULT_REVERTED}
    assert [(e.kind, e.message, e.fault) for e in journal.events if e.kind in kinds] == (
        rec.as_journal()
    )
    (ev,) = [e for e in journal.events if e.kind == EventKind.FAULT_INJECT_FAILED]
    assert (ev.fault, ev.target, ev.t) == ("freeze-web", "web", failed[0].t)
    assert journal.verdict == RunVerdict.ERROR and "freeze-web" in journal.reason
    ledger = _ledger(journal)
    reverts = {x["revert"]["id"] for x in ledger if x["op"] == "revert"}
    assert reverts == {x["id"] for x in ledger if x["op"] == "done" and x["ok"]}
    assert len(reverts) == 2


def test_a_tally_lets_through_the_first_failure_of_each_listener_and_counts_the_rest() -> None:
    hook: EventHook[int] = EventHook("numbers")
    hook.add_listener(_boom)
    tally = FailureTally()
    assert [f.listener for f in hook.fire(1, tally=tally)] == ["_boom"]
    assert hook.fire(2, tally=tally) == [] and hook.fire(3, tally=tally) == []
    assert tally.count("numbers", "_boom") == 3 and tally.count("numbers", "other") == 0
    assert len(hook.fire(4)) == 1  # without a tally every failure is returned
    # A listener added first runs first (the run's journal recorder).
    got: list[str] = []
    hook.add_first(lambda n: got.append("first"))
    hook.fire(5)
    assert got == ["first"]


def test_a_hook_calls_every_listener_and_returns_each_failure() -> None:
    hook: EventHook[int] = EventHook("numbers")
    got: list[int] = []

    @hook.add_listener
    def once(n: int) -> None:
        got.append(n)
        hook.remove_listener(once)  # a listener may unsubscribe itself while being fired

    hook.add_listener(_boom)
    hook.add_listener(lambda n: got.append(n * 10))
    failures = hook.fire(1)
    assert got == [1, 10]
    assert [(f.hook, f.listener, f.error) for f in failures] == [
        ("numbers", "_boom", "RuntimeError: boom on int")
    ]
    assert hook.fire(2) and got == [1, 10, 20]
    hook.remove_listener(_boom)
    hook.remove_listener(_boom)  # not subscribed: ignored
    assert hook.fire(3) == [] and len(hook) == 1


def test_every_hook_of_the_catalogue_is_on_run_events() -> None:
    events = RunEvents()
    hooks = dict(vars(type(events))["__annotations__"])
    assert list(hooks) == list(HOOKS)
    for name, spec in HOOKS.items():
        hook = getattr(events, name)
        assert isinstance(hook, EventHook) and hook.name == name
        assert hooks[name] == f"EventHook[{spec.payload.__name__}]"


@pytest.mark.usefixtures("no_leftovers")
def test_a_game_day_fires_its_own_hooks_around_the_runs_and_notes_a_failing_listener(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    _suite(suite)
    events = RunEvents()
    rec = Recorder()
    rec.listen(events)
    events.scenario_started.add_listener(_boom)
    gd, _ = run_gameday(
        [suite],
        report_dir=tmp_path / "r",
        base_dir=suite,
        time_scale=SCALE,
        preflight=False,
        events=events,
    )
    names = rec.names()
    assert names[:3] == ["preflight_done", "scenario_started", "run_started"]
    assert names[-2:] == ["scenario_ended", "gameday_ended"]
    assert names[2:-1] == RUN_ORDER
    assert [s.verdict in COMPLETED for s in gd.scenarios] == [True]  # the run itself completed
    assert gd.verdict == RunVerdict.ERROR
    assert any("scenario_started failed: RuntimeError" in n for n in gd.stack_notes)
