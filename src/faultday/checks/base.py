"""The Check base class: evaluate one assertion over one window of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.core.plugins import CHECKS, Registry
from faultday.core.protocols import CheckContext
from faultday.core.windows import CheckResult, Window

__all__ = ["Check", "CheckContext", "CheckParams", "check_registry"]


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
