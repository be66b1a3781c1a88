"""The Check base class: evaluate one assertion over one window of a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.core.plugins import CHECKS, Registry
from faultday.core.protocols import CheckContext
from faultday.core.windows import CheckResult, Window

__all__ = ["AnyCheck", "Check", "CheckContext", "CheckParams", "check_registry"]


P = TypeVar("P", bound=BaseModel)


class Check(ABC, Generic[P]):
    """Base class of every check, generic over its parameter model ``P``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # The parameter model (a plain class attribute: a ClassVar cannot hold a type variable).
    Params: type[P]
    # Checks that need a live stack (probes) rather than recorded observations.
    live: ClassVar[bool] = False

    def parse(self, raw: dict[str, JsonValue]) -> P:
        return self.Params.model_validate(raw)

    @abstractmethod
    def evaluate(self, ctx: CheckContext, params: P, window: Window) -> CheckResult:
        """Judge the window. Too few samples → Verdict.INSUFFICIENT, never PASSED."""


class CheckParams(BaseModel):
    # No NaN or infinity (YAML's .nan/.inf, or a number too large for a float).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# The registry loads checks by name at run time, so their models are unknown to the type
# checker there; the engine only hands a check what its own ``parse`` returned.
AnyCheck = Check[Any]


def check_registry() -> Registry[AnyCheck]:
    return Registry(CHECKS, "check")
