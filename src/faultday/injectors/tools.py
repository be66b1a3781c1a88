"""Tool-server faults: capacity cut (429-like MCP errors with retry-after) and slow tools.

Both go through the tool server's admin API (``PUT/DELETE /admin/faults/{id}``).
A fault is keyed by an id recorded in the Revert, so the revert is one DELETE,
idempotent, and harmless when the server restarted meanwhile (faults live in
its memory and went with it).
"""

from __future__ import annotations

import logging
import uuid
from abc import abstractmethod
from typing import ClassVar, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from faultday.core.targets import Revert, Target
from faultday.core.types import Duration
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, RevertData
from faultday_wire.admin import ToolFault

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 5.0
TOOLS = "tools"


class ToolOverloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=0, ge=0, description="calls allowed in flight (0 = none)")
    queue: int = Field(default=0, ge=0, description="calls allowed to wait")
    tools: list[str] | None = Field(default=None, description="tools affected; default all")
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)


class ToolTimeoutParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latency: Duration = Field(default=10.0, description="added to every call of the tools")
    tools: list[str] | None = Field(default=None, description="tools affected; default all")
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)


def _base(target: Target) -> str:
    base = target.admin_url or target.url
    if not base:
        raise InjectionError(f"{target.name}: no admin_url or url for the tool server")
    if "://" not in base:
        base = "http://" + base
    return base.rstrip("/")


def put_fault(base: str, fault_id: str, body: dict[str, JsonValue], *, target: str) -> None:
    try:
        resp = httpx.put(f"{base}/admin/faults/{fault_id}", json=body, timeout=ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InjectionError(f"{target}: tool admin API unreachable at {base}: {exc}") from exc
    if resp.status_code != 200:
        raise InjectionError(
            f"{target}: {base}/admin/faults/{fault_id} answered {resp.status_code}: "
            f"{resp.text[:300]}"
        )


def delete_fault(base: str, fault_id: str, *, target: str) -> None:
    try:
        resp = httpx.delete(f"{base}/admin/faults/{fault_id}", timeout=ADMIN_TIMEOUT_S)
    except httpx.ConnectError:
        log.info("%s: tool server not listening; fault %s went with it", target, fault_id)
        return
    except httpx.HTTPError as exc:
        raise RevertError(f"{target}: could not clear tool fault {fault_id}: {exc}") from exc
    if resp.status_code != 200:
        raise RevertError(f"{target}: clearing tool fault {fault_id} answered {resp.status_code}")


def fault_body(**fields: JsonValue) -> dict[str, JsonValue]:
    """The tool server's own body model, as sent (only the fields given): a value the server
    would refuse fails here, before anything is recorded or injected."""
    try:
        return ToolFault.model_validate(fields).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:
        raise InjectionError(f"the tool server would refuse this fault: {exc}") from exc


class ToolFaultData(RevertData):
    """The fault as the tool server's admin API takes it, and where to clear it."""

    base: str
    fault_id: str
    body: dict[str, JsonValue]


TP = TypeVar("TP", bound=ToolOverloadParams | ToolTimeoutParams)


class _ToolFault(Injector[TP, ToolFaultData]):
    component_types: ClassVar[frozenset[str] | None] = frozenset({TOOLS})
    Data = ToolFaultData

    @abstractmethod
    def _body(self, params: TP) -> dict[str, JsonValue]:
        """The fault's body for ``PUT /admin/faults/{id}``."""

    def prepare(self, ctx: FaultContext, target: Target, params: TP, *, fault: str) -> Revert:
        fault_id = f"{fault}-{uuid.uuid4().hex[:8]}"
        data = ToolFaultData(base=_base(target), fault_id=fault_id, body=self._body(params))
        return self.record(target, fault=fault, action="delete_tool_fault", data=data)

    def inject(self, ctx: FaultContext, target: Target, params: TP, revert: Revert) -> None:
        d = self.data(revert)
        put_fault(d.base, d.fault_id, d.body, target=target.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        delete_fault(d.base, d.fault_id, target=revert.target)


class ToolOverload(_ToolFault[ToolOverloadParams]):
    """Cut the tool server's capacity: calls beyond it fail with an MCP error + retry-after."""

    name = "tool_overload"
    summary = "tool server capacity cut: overload errors with retry-after"
    Params = ToolOverloadParams

    def _body(self, params: ToolOverloadParams) -> dict[str, JsonValue]:
        return fault_body(
            tools=list(params.tools) if params.tools is not None else None,
            concurrency=params.concurrency,
            queue=params.queue,
            error_rate=params.error_rate,
        )


class ToolTimeout(_ToolFault[ToolTimeoutParams]):
    """Make tools slow (added latency, optional error rate) so callers hit their timeouts."""

    name = "tool_timeout"
    summary = "slow tools: added latency per call"
    Params = ToolTimeoutParams

    def _body(self, params: ToolTimeoutParams) -> dict[str, JsonValue]:
        return fault_body(
            tools=list(params.tools) if params.tools is not None else None,
            latency_s=params.latency,
            error_rate=params.error_rate,
        )
