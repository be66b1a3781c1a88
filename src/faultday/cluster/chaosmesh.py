"""Chaos Mesh objects (chaos-mesh.org/v1alpha1): NetworkChaos, PodChaos and StressChaos.

faultday only builds the objects; Chaos Mesh's controller does the work. Every
object's selector is pinned to one namespace of the allowlist and to the
stack's ``part-of`` label, so no parameter can widen the blast radius.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultday.cluster.config import MANAGED_BY_LABEL, PART_OF_LABEL
from faultday.cluster.guards import BlastRadius
from faultday.core.types import Duration

API_VERSION = "chaos-mesh.org/v1alpha1"
FAULT_ANNOTATION = "faultday.dev/fault"


class ChaosKind(StrEnum):
    NETWORK = "NetworkChaos"
    POD = "PodChaos"
    STRESS = "StressChaos"


PLURALS: dict[ChaosKind, str] = {
    ChaosKind.NETWORK: "networkchaos",
    ChaosKind.POD: "podchaos",
    ChaosKind.STRESS: "stresschaos",
}
NETWORK_ACTIONS = ("delay", "loss", "duplicate", "corrupt", "partition", "bandwidth")
POD_ACTIONS = ("pod-kill", "pod-failure", "container-kill")

Mode = Literal["one", "all", "fixed", "fixed-percent", "random-max-percent"]


class ChaosMeshParams(BaseModel):
    """The ``with:`` block of ``chaos_mesh``: one object of one kind, aimed at the target."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ChaosKind
    action: str | None = Field(default=None, description="NetworkChaos/PodChaos action")
    mode: Mode = "all"
    value: str | None = Field(default=None, description="for fixed / *-percent modes")
    duration: Duration | None = Field(
        default=None, description="the object's own duration; default: until reverted"
    )
    # NetworkChaos
    latency: Duration | None = None
    jitter: Duration | None = None
    percent: float | None = Field(
        default=None, ge=0, le=100, description="loss/duplicate/corrupt percent"
    )
    correlation: float | None = Field(default=None, ge=0, le=100)
    rate: str | None = Field(default=None, pattern=r"^[0-9]+(bps|kbps|mbps|gbps)$")
    limit: int = Field(default=20971520, ge=1)
    buffer: int = Field(default=10000, ge=1)
    direction: Literal["to", "from", "both"] = "to"
    peer: str | None = Field(
        default=None, description="another component: only traffic to/from it is affected"
    )
    # PodChaos
    container_names: tuple[str, ...] = ()
    grace_period: int | None = Field(default=None, ge=0)
    # StressChaos
    cpu_workers: int | None = Field(default=None, ge=1, le=8192)
    cpu_load: int | None = Field(default=None, ge=0, le=100)
    memory_workers: int | None = Field(default=None, ge=1, le=8192)
    memory_size: str | None = Field(default=None, pattern=r"^[0-9]+(B|KB|MB|GB|%)?$")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.kind == ChaosKind.NETWORK:
            _need(
                self.action in NETWORK_ACTIONS, f"NetworkChaos action is one of {NETWORK_ACTIONS}"
            )
            need = {"delay": self.latency, "bandwidth": self.rate}.get(str(self.action), True)
            if self.action in ("loss", "duplicate", "corrupt"):
                need = self.percent
            _need(need is not None, f"action {self.action} needs its amount (latency/percent/rate)")
            _need(self.action != "partition" or self.peer is not None, "partition needs a peer")
        elif self.kind == ChaosKind.POD:
            _need(self.action in POD_ACTIONS, f"PodChaos action is one of {POD_ACTIONS}")
            _need(
                self.action != "container-kill" or bool(self.container_names),
                "container-kill needs container_names",
            )
        else:
            _need(self.action is None, "StressChaos takes no action")
            _need(
                self.cpu_workers is not None or self.memory_workers is not None,
                "StressChaos needs cpu_workers or memory_workers",
            )
        _need(
            self.mode in ("one", "all") or self.value is not None, f"mode {self.mode} needs value"
        )
        return self


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def go_duration(seconds: float) -> str:
    """Seconds as a Go duration string (``250ms``, ``30s``), the form Chaos Mesh parses."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def object_name(fault: str, suffix: str) -> str:
    """A DNS-1123 name for the object of one fault: ``faultday-<fault>-<suffix>``."""
    slug = re.sub(r"[^a-z0-9-]+", "-", fault.lower()).strip("-")[:40].strip("-") or "fault"
    return f"faultday-{slug}-{suffix}"[:63].rstrip("-")


def _selector(guard: BlastRadius, namespace: str, component: str) -> dict[str, Any]:
    return {"namespaces": [namespace], "labelSelectors": guard.selector_labels(component)}


def _network_spec(p: ChaosMeshParams) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": p.action, "direction": p.direction}
    corr = {"correlation": f"{p.correlation:g}"} if p.correlation is not None else {}
    if p.action == "delay" and p.latency is not None:
        spec["delay"] = {"latency": go_duration(p.latency), **corr}
        if p.jitter is not None:
            spec["delay"]["jitter"] = go_duration(p.jitter)
    elif p.action in ("loss", "duplicate", "corrupt"):
        spec[str(p.action)] = {str(p.action): f"{p.percent:g}", **corr}
    elif p.action == "bandwidth":
        spec["bandwidth"] = {"rate": p.rate, "limit": p.limit, "buffer": p.buffer}
    return spec


def build(  # noqa: PLR0912 - one branch per kind and optional field
    params: ChaosMeshParams,
    *,
    name: str,
    namespace: str,
    component: str,
    guard: BlastRadius,
    fault: str = "",
) -> dict[str, Any]:
    """The object to create; the guard must allow ``namespace`` (checked here too)."""
    guard.check_namespace(namespace)
    spec: dict[str, Any] = {"mode": params.mode, "selector": _selector(guard, namespace, component)}
    if params.value is not None:
        spec["value"] = params.value
    if params.duration is not None:
        spec["duration"] = go_duration(params.duration)
    if params.kind == ChaosKind.NETWORK:
        spec.update(_network_spec(params))
        if params.peer:
            spec["target"] = {"mode": "all", "selector": _selector(guard, namespace, params.peer)}
    elif params.kind == ChaosKind.POD:
        spec["action"] = params.action
        if params.container_names:
            spec["containerNames"] = list(params.container_names)
        if params.grace_period is not None:
            spec["gracePeriod"] = params.grace_period
    else:
        stressors: dict[str, Any] = {}
        if params.cpu_workers is not None:
            stressors["cpu"] = {"workers": params.cpu_workers}
            if params.cpu_load is not None:
                stressors["cpu"]["load"] = params.cpu_load
        if params.memory_workers is not None:
            stressors["memory"] = {"workers": params.memory_workers}
            if params.memory_size is not None:
                stressors["memory"]["size"] = params.memory_size
        spec["stressors"] = stressors
        if params.container_names:
            spec["containerNames"] = list(params.container_names)
    return {
        "apiVersion": API_VERSION,
        "kind": str(params.kind),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {PART_OF_LABEL: guard.part_of, MANAGED_BY_LABEL: "faultday"},
            "annotations": {FAULT_ANNOTATION: fault} if fault else {},
        },
        "spec": spec,
    }
