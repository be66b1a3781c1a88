"""Fault targets and reverts: plain data shared by the engine, the injectors and the ledger.

A Revert is written to the ledger before its fault acts, so a harness killed at
any instant leaves a ledger from which ``faultday recover`` can undo everything.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import JsonValue


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
