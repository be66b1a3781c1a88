"""The Injector protocol and the Revert record.

A fault's life: ``prepare`` computes the Revert (plain data) without touching
anything; the engine appends it to the on-disk ledger and fsyncs; only then is
``inject`` called. So a harness killed at any instant leaves a ledger from
which ``faultday recover`` can undo everything. ``revert`` must therefore be
idempotent and tolerate a fault that never took effect.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.core.plugins import INJECTORS, Registry
from faultday.core.protocols import FaultContext
from faultday.core.targets import Revert, Target, TargetKind

__all__ = ["FaultContext", "Injector", "NoParams", "injector_registry"]


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Injector(ABC):
    """Base class of every injector. Subclasses set the class variables below."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = NoParams
    target_kinds: ClassVar[frozenset[TargetKind]] = frozenset({TargetKind.COMPONENT})
    # None = any component type; otherwise the types this injector knows how to break.
    component_types: ClassVar[frozenset[str] | None] = None
    # True when the fault has no window of its own (e.g. a kill without restart).
    one_shot: ClassVar[bool] = False

    def parse(self, raw: dict[str, JsonValue]) -> BaseModel:
        return self.Params.model_validate(raw)

    @abstractmethod
    def prepare(
        self, ctx: FaultContext, target: Target, params: BaseModel, *, fault: str
    ) -> Revert:
        """Return the Revert that undoes this fault; must not change anything."""

    @abstractmethod
    def inject(self, ctx: FaultContext, target: Target, params: BaseModel, revert: Revert) -> None:
        """Make the fault take effect. Raise InjectionError when it cannot."""

    @abstractmethod
    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        """Undo the fault. Idempotent; must tolerate a fault that never took effect."""


def injector_registry() -> Registry[Injector]:
    return Registry(INJECTORS, "injector")
