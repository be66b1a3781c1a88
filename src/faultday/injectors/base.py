"""The Injector base class, generic over its parameter and revert-data models.

A fault's life: ``prepare`` computes the Revert (plain data) without touching
anything; the engine appends it to the on-disk ledger and fsyncs; only then is
``inject`` called. So a harness killed at any instant leaves a ledger from
which ``faultday recover`` can undo everything. ``revert`` must therefore be
idempotent and tolerate a fault that never took effect.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.core.plugins import INJECTORS, Registry
from faultday.core.protocols import FaultContext
from faultday.core.targets import Revert, Target, TargetKind

__all__ = [
    "AnyInjector",
    "FaultContext",
    "Injector",
    "NoParams",
    "NoRevertData",
    "RevertData",
    "injector_registry",
]


P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound="RevertData")


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RevertData(BaseModel):
    """Base of an injector's revert data: frozen, and validated again when read back
    from the ledger (``faultday recover`` reads what a crashed run wrote)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoRevertData(RevertData):
    """For an injector whose revert needs nothing but the target's name."""


class Injector(ABC, Generic[P, R]):
    """Base class of every injector, generic over its parameter model ``P`` and its
    revert-data model ``R``. Subclasses set the class variables below."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # The models (plain class attributes: a ClassVar cannot hold a type variable).
    Params: type[P]
    Data: type[R]
    target_kinds: ClassVar[frozenset[TargetKind]] = frozenset({TargetKind.COMPONENT})
    # None = any component type; otherwise the types this injector knows how to break.
    component_types: ClassVar[frozenset[str] | None] = None
    # True when the fault has no window of its own (e.g. a kill without restart).
    one_shot: ClassVar[bool] = False
    # None = the fault works on any stack driver; otherwise the drivers (names in the
    # faultday.drivers entry points) it acts through. A fault declaring "kubernetes" is
    # planned by `faultday k8s plan` (faultday.cluster.plan) with no list to edit.
    drivers: ClassVar[frozenset[str] | None] = None

    def parse(self, raw: dict[str, JsonValue]) -> P:
        return self.Params.model_validate(raw)

    def record(self, target: Target, *, fault: str, action: str, data: R) -> Revert:
        """The Revert for ``prepare`` to return: ``data`` is stored as JSON in the ledger.

        Only the fields ``data`` was given are stored (an injector whose revert has two
        forms fills in one); reading it back fills in the defaults.
        """
        return Revert(
            injector=self.name,
            fault=fault,
            target=target.name,
            action=action,
            data=data.model_dump(mode="json", exclude_unset=True),
        )

    def data(self, revert: Revert) -> R:
        """The revert's data as this injector's model."""
        return self.Data.model_validate(revert.data)

    @abstractmethod
    def prepare(self, ctx: FaultContext, target: Target, params: P, *, fault: str) -> Revert:
        """Return the Revert that undoes this fault; must not change anything."""

    @abstractmethod
    def inject(self, ctx: FaultContext, target: Target, params: P, revert: Revert) -> None:
        """Make the fault take effect. Raise InjectionError when it cannot."""

    @abstractmethod
    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        """Undo the fault. Idempotent; must tolerate a fault that never took effect."""


# The registry loads injectors by name at run time, so their models are unknown to the
# type checker there; the engine only hands an injector what its own ``parse`` returned.
AnyInjector = Injector[Any, Any]


def injector_registry() -> Registry[AnyInjector]:
    return Registry(INJECTORS, "injector")
