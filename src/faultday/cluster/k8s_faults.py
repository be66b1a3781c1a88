"""Kubernetes injectors: ``pod_delete``, ``node_gpu_loss`` and ``chaos_mesh``.

Each needs the Kubernetes driver while the fault is injected; its Revert
carries the cluster access and the blast radius, so ``faultday recover`` can
undo it with no live stack. Every change goes through the guarded cluster
client: objects outside the allowlisted namespaces or without the stack's
``part-of`` label are refused. The proxy injectors (latency, outage, …) need
nothing here: on Kubernetes an edge target names its Toxiproxy sidecar.
"""

from __future__ import annotations

import logging
import math
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from faultday.cluster.chaosmesh import PLURALS, ChaosMeshParams, build, object_name
from faultday.cluster.client import ClusterError, KubernetesCluster, Taint
from faultday.cluster.config import ClusterAccess
from faultday.cluster.guards import BlastRadius
from faultday.cluster.kubernetes import KubernetesStack, Touch
from faultday.cluster.official_images import LLM_TYPES
from faultday.cluster.plan import component_pods
from faultday.core.scenario import Fault
from faultday.core.targets import Revert, Target
from faultday.core.types import Duration
from faultday.errors import InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, RevertData

log = logging.getLogger(__name__)

KUBERNETES = frozenset({KubernetesStack.driver})


def _why(fault: Fault) -> str:
    return f"fault {fault.name} at {fault.at:g}s"


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _stack(ctx: FaultContext, injector: str) -> KubernetesStack:
    stack = ctx.stack
    if not isinstance(stack, KubernetesStack):
        kind = type(stack).__name__ if stack is not None else "no stack"
        raise InjectionError(f"{injector} needs the kubernetes driver (this run has {kind})")
    return stack


def _base_data(stack: KubernetesStack, component: str) -> dict[str, JsonValue]:
    return {
        "access": stack.config.access.model_dump(mode="json"),
        "guard": stack.guard.to_json(),
        "namespace": stack.namespace,
        "component": component,
    }


class ClusterData(RevertData):
    """Enough to reach the cluster again without a live stack: access and blast radius."""

    access: dict[str, JsonValue]
    guard: dict[str, JsonValue]
    namespace: str
    component: str


@contextmanager
def _cluster_for(ctx: FaultContext, data: ClusterData) -> Iterator[KubernetesCluster]:
    """The live stack's cluster, or one rebuilt from the revert's data (recover)."""
    if isinstance(ctx.stack, KubernetesStack):
        yield ctx.stack.cluster
        return
    access = ClusterAccess.model_validate(data.access)
    cluster = KubernetesCluster(access, BlastRadius.from_json(data.guard))
    try:
        yield cluster
    finally:
        cluster.close()


# -- pod_delete ---------------------------------------------------------------------------


class PodDeleteParams(_Params):
    count: int | None = Field(default=None, ge=1, description="pods to delete [1]")
    percent: float | None = Field(default=None, gt=0, le=100, description="or a share of them")
    grace_period: int = Field(default=0, ge=0, description="seconds; 0 = at once")
    seed: int | None = Field(default=None, description="which pods, reproducibly")
    wait_ready: Duration | None = Field(
        default=120.0, description="revert waits this long for the Deployment; null = not at all"
    )

    @model_validator(mode="after")
    def _one(self) -> Self:
        if self.count is not None and self.percent is not None:
            raise ValueError("give count or percent, not both")
        return self


class PodDeleteData(ClusterData):
    wait_ready: float | None = None  # seconds the revert waits for the Deployment; None = not


class PodDelete(Injector[PodDeleteParams, PodDeleteData]):
    """Delete pods of a component (by its labels): a count or a percentage of them."""

    name = "pod_delete"
    summary = "Kubernetes: delete N or N% of a component's pods"
    Params = PodDeleteParams
    Data = PodDeleteData
    drivers = KUBERNETES

    def touches(
        self, stack: KubernetesStack, fault: Fault, *, cluster: KubernetesCluster | None
    ) -> list[Touch]:
        """The pods it would delete (all that match: which ones is decided at inject)."""
        w = fault.with_
        amount = f"{w['percent']}% of" if "percent" in w else f"{w.get('count', 1)} of"
        return [
            Touch("delete", "Pod", stack.namespace, p, f"{_why(fault)}: {amount} these")
            for p in component_pods(stack, fault.target, cluster)
        ]

    def prepare(
        self, ctx: FaultContext, target: Target, params: PodDeleteParams, *, fault: str
    ) -> Revert:
        stack = _stack(ctx, self.name)
        data = PodDeleteData.model_validate(
            {**_base_data(stack, target.name), "wait_ready": params.wait_ready}
        )
        return self.record(target, fault=fault, action="await_ready", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: PodDeleteParams, revert: Revert
    ) -> None:
        stack = _stack(ctx, self.name)
        try:
            pods = [
                p
                for p in stack.cluster.list_pods(stack.namespace, component=target.name)
                if not p.deleting
            ]
            if not pods:
                raise InjectionError(f"no pods of {target.name} ({stack.selector(target.name)})")
            n = params.count or 1
            if params.percent is not None:
                n = max(1, math.ceil(len(pods) * params.percent / 100))
            chosen = random.Random(params.seed).sample(pods, min(n, len(pods)))  # noqa: S311
            for p in sorted(chosen, key=lambda p: p.name):
                stack.cluster.delete_pod(p, grace_period=params.grace_period)
        except ClusterError as exc:
            raise InjectionError(str(exc)) from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        """Nothing to undo (the Deployment replaces pods); wait until it is ready again."""
        data = self.data(revert)
        wait = data.wait_ready
        if wait is None:
            return
        ns, comp = data.namespace, data.component
        with _cluster_for(ctx, data) as cluster:

            def ready() -> bool:
                d = cluster.deployment(ns, comp)
                return d is None or d.is_ready

            try:
                cluster.wait(f"{ns}/{comp} ready after pod_delete", ready, timeout=wait)
            except ClusterError as exc:
                raise RevertError(str(exc)) from exc


# -- node_gpu_loss ------------------------------------------------------------------------


class NodeGpuLossParams(_Params):
    node: str | None = Field(default=None, description="default: the node the component runs on")
    taint_key: str = "nvidia.com/gpu"
    taint_value: str = "unhealthy"
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    delete_pods: bool = Field(default=True, description="delete the component's pods on the node")
    grace_period: int = Field(default=0, ge=0)
    require_gpu_label: bool = Field(
        default=True, description="refuse nodes without the driver config's GPU node label"
    )


class NodeGpuLossData(ClusterData):
    node: str
    was_unschedulable: bool  # the node's state before the fault: the revert restores only
    had_taint: bool  # what this fault changed
    taint: dict[str, str]


class NodeGpuLoss(Injector[NodeGpuLossParams, NodeGpuLossData]):
    """Cordon the GPU node, taint it nvidia.com/gpu=unhealthy, delete the LLM pods on it."""

    name = "node_gpu_loss"
    summary = "Kubernetes: cordon + taint the GPU node of an LLM component, delete its pods"
    Params = NodeGpuLossParams
    Data = NodeGpuLossData
    component_types = LLM_TYPES
    drivers = KUBERNETES

    def touches(
        self, stack: KubernetesStack, fault: Fault, *, cluster: KubernetesCluster | None
    ) -> list[Touch]:
        """The node it would cordon and taint, the pods on it, and the revert."""
        ns, why, w = stack.namespace, _why(fault), fault.with_
        node = str(w.get("node") or "")
        if not node and cluster is not None:
            try:
                node = next((p.node for p in cluster.list_pods(ns, component=fault.target)), "")
            except ClusterError:
                node = ""
        shown = node or f"<node of {fault.target}>"
        out = [Touch("cordon+taint", "Node", "", shown, f"{why}: nvidia.com/gpu=unhealthy")]
        if w.get("delete_pods", True):
            out += [
                Touch("delete", "Pod", ns, p, f"{why}: on {shown}")
                for p in component_pods(stack, fault.target, cluster, node=node or None)
            ]
        return [*out, Touch("untaint+uncordon", "Node", "", shown, f"revert of {fault.name}")]

    def prepare(
        self, ctx: FaultContext, target: Target, params: NodeGpuLossParams, *, fault: str
    ) -> Revert:
        """Find and guard-check the node; record its state before the fault (reads only)."""
        stack = _stack(ctx, self.name)
        cluster = stack.cluster
        try:
            comp_pods = cluster.list_pods(stack.namespace, component=target.name)
            node_name = params.node or next((p.node for p in comp_pods if p.node), "")
            if not node_name:
                raise InjectionError(f"no scheduled pod of {target.name}: no node to fail")
            stack_pods = [p.name for p in cluster.list_pods(stack.namespace, node=node_name)]
            node = cluster.read_node(node_name)
        except ClusterError as exc:
            raise InjectionError(str(exc)) from exc
        stack.guard.check_node(
            node=node_name,
            node_labels=node.labels,
            stack_pods_on_node=stack_pods,
            require_label=stack.config.gpu_node_label if params.require_gpu_label else "",
        )
        taint = Taint(params.taint_key, params.taint_value, params.taint_effect)
        data = NodeGpuLossData.model_validate(
            {
                **_base_data(stack, target.name),
                "node": node_name,
                "was_unschedulable": node.unschedulable,
                "had_taint": taint in node.taints,
                "taint": {**taint.to_api()},
            }
        )
        return self.record(target, fault=fault, action="uncordon_untaint", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: NodeGpuLossParams, revert: Revert
    ) -> None:
        stack = _stack(ctx, self.name)
        cluster = stack.cluster
        data = self.data(revert)
        node_name = data.node
        taint = Taint(params.taint_key, params.taint_value, params.taint_effect)
        try:
            if not data.was_unschedulable:
                cluster.set_unschedulable(node_name, True)
            node = cluster.read_node(node_name)
            if taint not in node.taints:
                cluster.set_taints(node_name, (*node.taints, taint))
            if params.delete_pods:
                for p in cluster.list_pods(stack.namespace, component=target.name, node=node_name):
                    cluster.delete_pod(p, grace_period=params.grace_period)
        except ClusterError as exc:
            raise InjectionError(f"node_gpu_loss on {node_name}: {exc}") from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        """Remove our taint, then uncordon — only what this fault added; idempotent."""
        data = self.data(revert)
        node_name = data.node
        raw = data.taint
        taint = Taint(raw["key"], raw["value"], raw["effect"])
        with _cluster_for(ctx, data) as cluster:
            try:
                node = cluster.read_node(node_name)
                if not data.had_taint and taint in node.taints:
                    cluster.set_taints(node_name, tuple(t for t in node.taints if t != taint))
                if not data.was_unschedulable and node.unschedulable:
                    cluster.set_unschedulable(node_name, False)
            except ClusterError as exc:
                if exc.status == 404:  # the node is gone: nothing of ours is left on it
                    log.warning("node %s no longer exists; nothing to revert", node_name)
                    return
                raise RevertError(f"node_gpu_loss revert on {node_name}: {exc}") from exc


# -- chaos_mesh ---------------------------------------------------------------------------


class ChaosMeshInjectorParams(ChaosMeshParams):
    gone_timeout: Duration = Field(default=60.0, description="revert waits for the object to go")


class ChaosData(ClusterData):
    kind: str
    plural: str
    name: str  # the object's name, chosen before it exists
    gone_timeout: float = 60.0


class ChaosMesh(Injector[ChaosMeshInjectorParams, ChaosData]):
    """Create a Chaos Mesh NetworkChaos, PodChaos or StressChaos aimed at a component."""

    name = "chaos_mesh"
    summary = "Kubernetes: a Chaos Mesh NetworkChaos / PodChaos / StressChaos on a component"
    Params = ChaosMeshInjectorParams
    Data = ChaosData
    suffix_len: ClassVar[int] = 8
    drivers = KUBERNETES

    def touches(
        self, stack: KubernetesStack, fault: Fault, *, cluster: KubernetesCluster | None
    ) -> list[Touch]:
        """The Chaos Mesh object it would create, and delete at the revert."""
        w = fault.with_
        params = ChaosMeshParams.model_validate({k: v for k, v in w.items() if k != "gone_timeout"})
        ns, kind, name = stack.namespace, str(params.kind), object_name(fault.name, "<id>")
        return [
            Touch(
                "create", kind, ns, name, f"{_why(fault)}: selects {stack.selector(fault.target)}"
            ),
            Touch("delete", kind, ns, name, f"revert of {fault.name}"),
        ]

    def prepare(
        self, ctx: FaultContext, target: Target, params: ChaosMeshInjectorParams, *, fault: str
    ) -> Revert:
        stack = _stack(ctx, self.name)
        if params.peer is not None and params.peer not in stack.components():
            raise InjectionError(f"chaos_mesh peer {params.peer!r} is not a component of the stack")
        data = ChaosData.model_validate(
            {
                **_base_data(stack, target.name),
                "kind": str(params.kind),
                "plural": PLURALS[params.kind],
                "name": object_name(fault, uuid.uuid4().hex[: self.suffix_len]),
                "gone_timeout": params.gone_timeout,
            }
        )
        return self.record(target, fault=fault, action="delete_chaos", data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: ChaosMeshInjectorParams, revert: Revert
    ) -> None:
        stack = _stack(ctx, self.name)
        data = self.data(revert)
        obj = build(
            params,
            name=data.name,
            namespace=stack.namespace,
            component=target.name,
            guard=stack.guard,
            fault=revert.fault,
        )
        try:
            stack.cluster.create_chaos(obj, plural=data.plural)
        except ClusterError as exc:
            raise InjectionError(str(exc)) from exc

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        """Delete the object, then check it is gone (Chaos Mesh recovers in a finalizer)."""
        data = self.data(revert)
        ns, plural, name = data.namespace, data.plural, data.name
        with _cluster_for(ctx, data) as cluster:
            try:
                cluster.delete_chaos(namespace=ns, plural=plural, name=name)
                cluster.wait(
                    f"{plural} {ns}/{name} gone",
                    lambda: cluster.get_chaos(namespace=ns, plural=plural, name=name) is None,
                    timeout=data.gone_timeout,
                    interval=0.5,
                )
            except ClusterError as exc:
                raise RevertError(f"chaos_mesh revert of {ns}/{name}: {exc}") from exc
