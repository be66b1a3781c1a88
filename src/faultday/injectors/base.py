"""The Injector protocol and the Revert record.

A fault's life: ``prepare`` computes the Revert (plain data) without touching
anything; the engine appends it to the on-disk ledger and fsyncs; only then is
``inject`` called. So a harness killed at any instant leaves a ledger from
which ``faultday recover`` can undo everything. ``revert`` must therefore be
idempotent and tolerate a fault that never took effect.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue

from faultday.plugins import INJECTORS, Registry


class TargetKind(StrEnum):
    COMPONENT = "component"
    EDGE = "edge"


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved fault target: a running component, or a proxied edge between two."""

    name: str
    kind: TargetKind
    component_type: str = ""  # llmsim, vllm, redis, triton, qdrant, agent, tools, command …
    url: str = ""  # base URL (or host:port) of the component, or the edge's listen address
    admin_url: str = ""  # the component's fault admin API, where it has one
    pid: int | None = None  # main process (components run by the process driver)
    proxy_api: str = ""  # edges: base URL of the Toxiproxy-API server
    proxy_name: str = ""  # edges: the proxy's name on that server
    upstream: str = ""  # edges: host:port the proxy forwards to


@dataclass(frozen=True, slots=True)
class Revert:
    """How to undo one fault: plain data, written to the ledger before the fault acts."""

    injector: str
    fault: str
    target: str
    action: str
    data: dict[str, JsonValue] = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "injector": self.injector,
            "fault": self.fault,
            "target": self.target,
            "action": self.action,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, raw: dict[str, JsonValue]) -> Revert:
        data = raw.get("data")
        return cls(
            id=str(raw["id"]),
            injector=str(raw["injector"]),
            fault=str(raw["fault"]),
            target=str(raw["target"]),
            action=str(raw["action"]),
            data=dict(data) if isinstance(data, dict) else {},
        )


class FaultContext(Protocol):
    """What an injector may use besides its target: the run folder and the stack driver."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def live(self) -> bool:
        """False during ``faultday recover``: no stack driver, only the ledger's data."""
        ...

    def target(self, name: str) -> Target: ...

    def restart(self, component: str, *, timeout: float) -> None:
        """Restart a component through the stack driver and wait until it is ready."""
        ...


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
