"""The Check protocol: evaluate one assertion over one window of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.core.clock import Clock
from faultday.core.plugins import CHECKS, Registry
from faultday.core.records import Observations
from faultday.core.targets import Target
from faultday.core.windows import CheckResult, Window

if TYPE_CHECKING:
    from faultday.engine.plan import Plan


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
