"""The Check protocol: evaluate one assertion over one window of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.engine.clock import Clock
from faultday.injectors.base import Target
from faultday.observe.records import Observations
from faultday.plugins import CHECKS, Registry

if TYPE_CHECKING:
    from faultday.engine.plan import Plan


class Verdict(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    INSUFFICIENT = "insufficient"  # too few samples in the window to decide: never a pass
    ERROR = "error"  # the check itself could not run


class WindowKind(StrEnum):
    BASELINE = "baseline"
    FAULT = "fault"  # during: a fault's window
    AFTER = "after"  # after: from a fault's end to run end
    RECOVERED = "recovered"  # steady state again, after the last fault + recovery
    RUN = "run"  # the whole run
    ABORT = "abort"  # a sliding window watched by an abort condition


@dataclass(frozen=True, slots=True)
class Window:
    """A span of run time (seconds from t=0) that a check looks at."""

    kind: WindowKind
    label: str
    start: float
    end: float
    fault: str = ""

    @property
    def length(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    label: str
    window: str
    verdict: Verdict
    expected: str = ""
    observed: str = ""
    n: int = 0
    message: str = ""

    def describe(self) -> str:
        """``during xid79: latency ttft p99 expected ≤ 1.5s, observed 4.2s (n=812)``."""
        text = f"{self.window}: {self.label}"
        if self.expected:
            text += f" expected {self.expected}"
        if self.observed:
            text += f", observed {self.observed}"
        text += f" (n={self.n})"
        if self.message:
            text += f" — {self.message}"
        return text


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
    def plan(self) -> Plan:
        """The run's windows (baseline, faults, recovery) and schedule."""
        ...


class Check(ABC):
    """Base class of every check."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]]
    # Checks that need a live stack (probes) rather than recorded observations.
    live: ClassVar[bool] = False

    def parse(self, raw: dict[str, JsonValue]) -> BaseModel:
        return self.Params.model_validate(raw)

    @abstractmethod
    def evaluate(self, ctx: CheckContext, params: BaseModel, window: Window) -> CheckResult:
        """Judge the window. Too few samples → Verdict.INSUFFICIENT, never PASSED."""


class CheckParams(BaseModel):
    # No NaN or infinity (YAML's .nan/.inf, or a number too large for a float).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def check_registry() -> Registry[Check]:
    return Registry(CHECKS, "check")
