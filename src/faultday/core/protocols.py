"""The contracts between the parts: what a stack driver, a participant, an injector's
and a check's context promise.

The engine, the injectors, the checks and the participants type against these,
never against a concrete driver or ``Run``; the drivers (process, docker,
kubernetes) and ``Run`` satisfy them structurally. ``tests/core/test_protocols.py``
checks each driver against :class:`StackDriver`, signatures included.

Optional driver abilities are small protocols of their own (:class:`Interruptible`,
:class:`LoadHost`, :class:`DryRunnable`), checked with ``isinstance``: a driver declares
one by having its method, and the type checker sees the method's signature after the check.

Where a contract needs something of the scenario or the plan (which live above
core), it names only the fields it reads (:class:`ScenarioView`, :class:`PlanView`),
so core stays a leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from faultday.core.clock import Clock
from faultday.core.events import RunEvents
from faultday.core.ledger import Ledger
from faultday.core.records import Observations
from faultday.core.scenario import Scenario
from faultday.core.spanstore import CollectorAddress
from faultday.core.stackinfo import StackInfo
from faultday.core.targets import Target
from faultday.core.windows import Window, WindowKind

__all__ = [
    "CheckContext",
    "ConfigurableDriver",
    "DryRunnable",
    "FaultContext",
    "Interruptible",
    "LoadHost",
    "LoadView",
    "Participant",
    "PlanView",
    "RunView",
    "ScenarioView",
    "SpecView",
    "StackDriver",
    "TraceHost",
]


# ---- the stack ------------------------------------------------------------------------


@runtime_checkable
class StackDriver(Protocol):
    """A stack profile brought up by one driver: processes, containers or pods.

    Component names are the profile's; ``target`` also resolves edges (``a->b``).
    """

    @property
    def driver(self) -> str:
        """The driver's plugin name in ``faultday.drivers``: process, docker, kubernetes."""
        ...

    @property
    def run_dir(self) -> Path:
        """The stack's own folder (logs, ledger); a shared stack's is not the run's."""
        ...

    def up(self, *, timeout: float | None = None) -> None:
        """Start every component and wait until ready; None = the driver's own bound."""
        ...

    def down(self) -> None:
        """Stop everything the driver started; idempotent."""
        ...

    def restart(self, component: str, *, timeout: float) -> None:
        """Restart one component and wait (bounded) until it is ready again."""
        ...

    def pause(self, component: str) -> None:
        """Freeze a component; StackError where the driver cannot."""
        ...

    def resume(self, component: str) -> None:
        """Thaw a paused component; StackError where the driver cannot."""
        ...

    def endpoints(self) -> dict[str, str]:
        """Component → base URL (or host:port) reachable from the harness."""
        ...

    def target(self, name: str) -> Target:
        """A component or an edge, resolved for an injector."""
        ...

    def target_names(self) -> list[str]: ...

    def versions(self) -> dict[str, str]:
        """Component → the version or image it runs (for the report)."""
        ...

    def describe(self) -> StackInfo: ...


@runtime_checkable
class Interruptible(Protocol):
    """A driver whose waits for readiness a stop request can cut short (process driver)."""

    def interrupt(self) -> None:
        """End every wait for readiness now and start nothing more."""
        ...


@runtime_checkable
class TraceHost(Protocol):
    """A driver whose stack has a trace collector (process driver; docs/traces.md)."""

    def collector(self) -> CollectorAddress | None:
        """Where the collector is, or None when the profile has none."""
        ...


@runtime_checkable
class DryRunnable(Protocol):
    """A driver that can list every object a run would touch, connecting to nothing
    (kubernetes: ``faultday run --dry-run --driver kubernetes``)."""

    def dry_run(self, scenario: Scenario) -> list[str]: ...


@runtime_checkable
class ConfigurableDriver(Protocol):
    """A driver *class* with a settings file of its own (``faultday run --driver-config``):
    docker and kubernetes. Checked on the class, before a driver is built."""

    def load_config(self, path: Path) -> BaseModel:
        """The validated settings, passed to the driver as ``config``."""
        ...


# The load host's own types (the scenario's load spec, the load options) live above core.
SpecT_contra = TypeVar("SpecT_contra", contravariant=True)
OptionsT_contra = TypeVar("OptionsT_contra", contravariant=True)


@runtime_checkable
class LoadHost(Protocol[SpecT_contra, OptionsT_contra]):
    """A stack driver that runs the load itself (the kubernetes driver: Locust as Jobs)."""

    def load_participant(self, spec: SpecT_contra, options: OptionsT_contra) -> Participant | None:
        """The participant that runs this load, or None to run it beside the harness."""
        ...


# ---- what participants, injectors and checks see of a run --------------------------------


class LoadView(Protocol):
    """The fields of a scenario's ``load:`` that a check reads (capacity: the step shape)."""

    @property
    def shape(self) -> str: ...

    @property
    def users(self) -> int: ...

    @property
    def spawn_rate(self) -> float: ...

    @property
    def step_users(self) -> int | None: ...

    @property
    def step_every(self) -> float | None: ...


class FaultTimesView(Protocol):
    """When a scheduled fault acts (scenario seconds): the load's answer slots follow them."""

    @property
    def at(self) -> float: ...

    @property
    def end(self) -> float: ...


class SpecView(Protocol):
    """The fields of a scenario's ``spec:`` that participants and checks read."""

    @property
    def duration(self) -> float: ...

    @property
    def warmup(self) -> float: ...

    @property
    def recovery(self) -> float: ...

    @property
    def faults(self) -> Sequence[FaultTimesView]: ...

    @property
    def load(self) -> LoadView: ...


class ScenarioView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> SpecView: ...


class PlanView(Protocol):
    """The run's windows (baseline, faults, recovery)."""

    @property
    def scenario(self) -> ScenarioView: ...

    @property
    def windows(self) -> tuple[Window, ...]: ...

    def window(self, kind: WindowKind, fault: str = "") -> Window:
        """The window of that kind (and fault); KeyError when the run has none."""
        ...


class RunView(Protocol):
    """The parts of a run a participant may use."""

    @property
    def scenario(self) -> ScenarioView: ...

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

    @property
    def stack(self) -> StackDriver | None:
        """The run's stack once it is up (a load host may run the load itself)."""
        ...

    @property
    def events(self) -> RunEvents:
        """The run's hooks: a participant that looks again when a fault acts (the metrics
        scraper, the process sampler) listens to ``fault_applied`` from ``start`` to ``stop``."""
        ...

    def endpoints(self) -> dict[str, str]: ...

    def target(self, name: str) -> Target: ...

    def event(self, kind: str, message: str = "", **data: object) -> None:
        """Add an event to the run's timeline (breaker opened, replica restarted …)."""
        ...

    def error(self, message: str) -> None:
        """Report a failure of a participant: logged at ERROR, journaled, fails the run."""
        ...


class Participant(Protocol):
    """The load generator and the observers: they run beside the timeline."""

    name: str

    def start(self, run: RunView) -> None:
        """Begin (load starts at warm-up); must return promptly."""
        ...

    def stop(self) -> None:
        """Stop and flush everything observed; bounded in time; idempotent."""
        ...


class FaultContext(Protocol):
    """What an injector may use besides its target: the run folder and the stack driver."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def live(self) -> bool:
        """False during ``faultday recover``: no stack driver, only the ledger's data."""
        ...

    @property
    def stack(self) -> StackDriver | None:
        """The live stack; None during ``faultday recover``."""
        ...

    def target(self, name: str) -> Target: ...

    def restart(self, component: str, *, timeout: float) -> None:
        """Restart a component through the stack driver and wait until it is ready."""
        ...


class CheckContext(Protocol):
    """What a check may read: observations, fault and revert times, targets."""

    @property
    def observations(self) -> Observations: ...

    def fault_times(self, fault: str) -> tuple[float, float]:
        """(injected, reverted) in run seconds; reverted is inf while still active."""
        ...

    def target(self, name: str) -> Target: ...

    @property
    def time_scale(self) -> float: ...

    @property
    def run_dir(self) -> Path:
        """The run folder: component logs, audit and trace files."""
        ...

    @property
    def clock(self) -> Clock: ...

    @property
    def plan(self) -> PlanView:
        """The run's windows (baseline, faults, recovery) and schedule."""
        ...

    @property
    def stack(self) -> StackDriver | None:
        """The live stack (a shared stack keeps its logs in its own folder)."""
        ...
