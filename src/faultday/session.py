"""The one way to run a scenario: ``faultday run``, the pytest plugin and the game day all call
:func:`run_scenario`.

It applies the command line's overrides, builds the run, attaches it to the signal
policy, takes the stack from the pool (or lets the run start its own), executes
it and renders its reports. Around it: the stack pool, the target resolver a
scenario is validated with, and the SIGINT/SIGTERM policy.

Signals during a run (:class:`SignalPolicy`):

1. The first signal asks the run to stop: the fault windows end, every fault is
   reverted, the stack goes down, the journal and the report are written (exit 3).
2. A second one, while the run is still starting or waiting (a slow stack-up),
   stops the waiting at once; the reverts and the stack-down still run.
3. Once reverting has begun, signals no longer interrupt anything. The first one
   in that phase only says what is going on; the next skips the waits for
   restarts (a ``gpu_loss`` replica is not brought back, since the stack goes
   down anyway) while every toxic is still removed, every paused process resumed,
   and the journal written.

Only one KeyboardInterrupt is ever raised, and never once reverting has begun:
an exception raised inside a revert would leave the fault in place.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Protocol

from faultday.core.events import RunEvents, ScenarioEnded
from faultday.core.journal import Journal, RunVerdict
from faultday.core.ledger import Ledger
from faultday.core.plugins import DRIVERS, Registry, did_you_mean
from faultday.core.profile import EDGE_SEP, load_profile
from faultday.core.protocols import StackDriver
from faultday.core.scenario import Scenario
from faultday.core.targets import TargetKind
from faultday.engine.runner import Run, RunOptions
from faultday.engine.stacks import build_stack, default_stack_factory
from faultday.errors import UsageError
from faultday.report.render import render_all
from faultday.scenario.loader import LoadedScenario, TargetResolver, stack_ref

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


# ---- what a command asks for --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Overrides:
    """Spec fields a command line replaces in every scenario it runs (None: as written)."""

    stack: str | None = None
    policy: str | None = None

    def apply(self, loaded: LoadedScenario) -> LoadedScenario:
        update = {k: v for k, v in (("stack", self.stack), ("policy", self.policy)) if v}
        if not update:
            return loaded
        spec = loaded.scenario.spec.model_copy(update=update)
        return LoadedScenario(
            scenario=loaded.scenario.model_copy(update={"spec": spec}),
            file=loaded.file,
            document=loaded.document,
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """How every scenario of one command runs."""

    report_dir: Path
    base_dir: Path
    time_scale: float = 1.0
    driver: str = "process"  # a `faultday.drivers` plugin: process, docker, kubernetes
    driver_config: Path | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished scenario: its journal (reports rendered) and the reporters that failed."""

    scenario: Scenario  # as run: the overrides applied
    journal: Journal
    run_dir: Path
    report_errors: tuple[str, ...]


def run_scenario(
    loaded: LoadedScenario,
    *,
    settings: Settings,
    overrides: Overrides | None = None,
    pool: StackPool | None = None,
    signals: SignalPolicy | None = None,
    events: RunEvents | None = None,
) -> Outcome:
    """Run one scenario to its journal and reports; the stack comes from ``pool`` if given.

    ``signals`` is the command's installed policy: the run is attached to it, and a
    second signal while the shared stack starts stops the run instead of escaping.
    ``events`` are the hooks the run fires (core/events.py); this fires ``scenario_ended``
    once the journal is final, before the reports are rendered.
    """
    loaded = (overrides or Overrides()).apply(loaded)
    events = events or RunEvents()
    check_driver(settings.driver)
    options = RunOptions(
        time_scale=settings.time_scale,
        report_dir=settings.report_dir,
        base_dir=settings.base_dir,
        driver=settings.driver,
        driver_config=settings.driver_config,
        events=events,
    )
    the_run = Run(loaded, options)
    if signals is not None:
        signals.attach(the_run)
    if pool is not None:
        options.shared_stack = _shared_stack(pool, the_run, signals)
    journal = the_run.execute(default_stack_factory)
    if pool is not None and options.shared_stack is not None:
        pool.after(journal)
    the_run.fire_after_end(
        events.scenario_ended, ScenarioEnded(loaded.scenario.name, journal, the_run.run_dir)
    )
    errors = render_all(journal, the_run.run_dir)
    return Outcome(loaded.scenario, journal, the_run.run_dir, tuple(errors))


def check_driver(name: str) -> None:
    """UsageError (before any run folder exists) for a driver no plugin provides."""
    drivers: Registry[object] = Registry(DRIVERS, "driver")
    if name not in drivers:
        raise UsageError(f"--driver: no driver {name!r}{did_you_mean(name, drivers.names())}")


def _shared_stack(
    pool: StackPool, the_run: Run, signals: SignalPolicy | None
) -> StackDriver | None:
    try:
        return pool.get(the_run.loaded)
    except KeyboardInterrupt:
        if signals is None:  # not the policy's second signal: the user's Ctrl-C of pytest
            raise
        the_run.request_stop("interrupted while the shared stack started")
    except Exception:
        # The run then starts its own stack and journals why that failed too.
        log.exception("shared stack for %s did not come up", the_run.scenario.name)
    return None


def target_resolver(base_dir: Path) -> TargetResolver:
    """Targets of a stack profile (components and edges), so an unknown one fails up front."""

    def resolve(stack: str) -> dict[str, TargetKind]:
        profile = load_profile(stack, base_dir=base_dir)
        return {
            n: TargetKind.EDGE if EDGE_SEP in n else TargetKind.COMPONENT
            for n in profile.target_names()
        }

    return resolve


# ---- the stack pool -----------------------------------------------------------------


class StackPool:
    """One stack shared by consecutive scenarios with the same stack and policy.

    Rebuilt when the next scenario wants another stack, and after a run that may
    have left it changed: one that did not pass cleanly, failed a revert, or
    left a component that is not ready.
    """

    def __init__(self, folder: Path, *, base_dir: Path, notes: list[str]) -> None:
        self.dir = folder
        self.base_dir = base_dir
        self.notes = notes
        self.key: tuple[str, str | None] | None = None
        self.stack: StackDriver | None = None
        self.count = 0

    def get(self, loaded: LoadedScenario) -> StackDriver:
        """The stack for this scenario, started if the last one does not fit."""
        spec = loaded.scenario.spec
        key = (stack_ref(spec.stack, loaded.file), spec.policy)
        if self.stack is not None and key == self.key:
            return self.stack
        self.close()
        self.count += 1
        # Absolute: components get it on their command line and run in their own folders.
        folder = (self.dir / f"stack-{self.count}").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        stack = build_stack(
            spec.stack,
            scenario_file=loaded.file,
            base_dir=self.base_dir,
            run_dir=folder,
            ledger=Ledger.in_dir(folder),
            policy=spec.policy,
        )
        stack.up()
        self.stack, self.key = stack, key
        self.notes.append(
            f"stack {self.count} ({key[0]}, policy {key[1] or 'default'}) "
            f"up for {loaded.scenario.name}; logs in {folder.name}/"
        )
        return stack

    def after(self, journal: Journal) -> None:
        """Close the stack if this run may have left it changed."""
        if self.stack is None:
            return
        if journal.verdict not in (RunVerdict.PASSED, RunVerdict.FAILED):
            why = f"run {journal.verdict}"
        elif any(f.revert_ok is False for f in journal.faults):
            why = "a revert failed"
        else:
            why = self._unready()
        if why:
            name = Path(journal.scenario_file).name
            self.notes.append(f"stack {self.count} restarted after {name}: {why}")
            self.close()

    def _unready(self) -> str:
        if self.stack is None:
            return ""
        try:
            info = self.stack.describe()
        except Exception as exc:  # noqa: BLE001 - a stack that cannot describe itself is not reused
            return f"cannot describe it: {exc}"
        bad = [c.name for c in info.components if c.health not in ("ready", "running")]
        return f"not ready: {', '.join(bad)}" if bad else ""

    def close(self) -> None:
        stack, self.stack, self.key = self.stack, None, None
        if stack is not None:
            try:
                stack.down()
            except Exception as exc:
                self.notes.append(f"stack down failed: {exc}")
                log.exception("stack down failed")


# ---- signals ------------------------------------------------------------------------


class StoppableRun(Protocol):
    """The parts of a run the signal policy drives."""

    @property
    def reverting(self) -> bool:
        """True from the moment the run starts undoing its faults."""
        ...

    def request_stop(self, reason: str) -> None: ...

    def hurry(self) -> None:
        """Skip waits for restarts; every other revert still runs."""
        ...


class SignalPolicy:
    """The handler for SIGINT/SIGTERM of one command; ``say`` prints to the console."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._run: StoppableRun | None = None
        self.stop_requested = False  # for loops between runs (a game day)
        self._raised = False
        self._during_revert = 0

    def attach(self, run: StoppableRun | None) -> None:
        """The run signals now act on (None between the runs of a game day)."""
        self._run = run
        self._during_revert = 0
        if run is not None and self.stop_requested:
            run.request_stop("interrupted")

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        run = self._run
        if run is not None and run.reverting:
            self._while_reverting(run, name)
            return
        if not self.stop_requested:
            self.stop_requested = True
            if run is not None:
                run.request_stop(f"interrupted by {name}")
            self._say(
                f"{name}: stopping — every fault is reverted and the stack stopped; "
                "send it again to stop waiting (the reverts still run)"
            )
            return
        if not self._raised:
            self._raised = True
            self._say(f"{name}: no more waiting; reverting every fault now")
            raise KeyboardInterrupt
        self._say(f"{name}: already stopping; the reverts will run")

    def _while_reverting(self, run: StoppableRun, name: str) -> None:
        self._during_revert += 1
        if self._during_revert == 1:
            self._say(
                f"{name}: reverts in progress and not interruptible. Another signal skips "
                "the waits for restarts; toxics are still removed, paused processes "
                "resumed, the stack stopped and the journal written"
            )
            return
        run.hurry()
        self._say(
            f"{name}: skipping the waits for restarts; still removing toxics, "
            "resuming paused processes, stopping the stack and writing the journal"
        )

    @contextmanager
    def installed(self) -> Iterator[SignalPolicy]:
        """Install the handler for SIGINT and SIGTERM; restore the previous ones after."""
        old = {s: signal.signal(s, self.handle) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)
