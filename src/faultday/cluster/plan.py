"""Dry run: exactly which cluster objects a stack (and a scenario's faults) would touch.

Without ``--live`` the plan is computed from the rendered manifests and the
scenario alone (no API call): pods appear as their label selector. With a
cluster connection, selectors are resolved to the pods and nodes they match now.

Which faults act on cluster objects is what each injector declares (``drivers``
containing ``kubernetes``; see docs/kubernetes.md), read through the injector
registry; a fault that is also a ``PlannedFault`` lists its objects itself.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from faultday.cluster.client import KubernetesCluster
from faultday.cluster.config import LoadPlacement
from faultday.cluster.kubernetes import KubernetesStack, Touch
from faultday.cluster.load_jobs import advertised_sink, load_objects
from faultday.core.plugins import Registry
from faultday.core.scenario import Fault, Scenario
from faultday.errors import FaultdayError
from faultday.injectors.base import AnyInjector, injector_registry


@runtime_checkable
class PlannedFault(Protocol):
    """A Kubernetes fault that says, without acting, which objects it would change."""

    def touches(
        self, stack: KubernetesStack, fault: Fault, *, cluster: KubernetesCluster | None
    ) -> list[Touch]:
        """The objects ``fault`` would change, in the order it changes them."""
        ...


def is_kubernetes_fault(injector: type[AnyInjector]) -> bool:
    """Whether the injector declares that it acts through the kubernetes driver."""
    return injector.drivers is not None and KubernetesStack.driver in injector.drivers


def kubernetes_injectors(registry: Registry[AnyInjector] | None = None) -> frozenset[str]:
    """The injectors that act on cluster objects, by what each declares (``drivers``)."""
    registry = registry or injector_registry()
    found = set()
    for name in registry.names():
        try:
            injector = registry.get(name)
        except FaultdayError:
            continue  # unavailable here (an optional extra missing): it runs nowhere
        if is_kubernetes_fault(injector):
            found.add(name)
    return frozenset(found)


def plan(
    stack: KubernetesStack, *, scenario: Scenario | None = None, live: bool = False
) -> list[Touch]:
    """Driver actions (apply/delete) first, then each fault's objects in schedule order."""
    out = [t for t in stack.plan() if t.why == "up" or not scenario]
    if scenario is not None:
        load = load_touches(stack, scenario)
        out += [t for t in load if t.action == "apply"]
        registry = injector_registry()
        for fault in sorted(scenario.spec.faults, key=lambda f: f.at):
            cluster = stack.cluster if live else None
            out += fault_touches(stack, fault, cluster=cluster, registry=registry)
        out += [t for t in load if t.action == "delete"]
        out += [t for t in stack.plan() if t.why == "down"]
    return out


def load_touches(stack: KubernetesStack, scenario: Scenario) -> list[Touch]:
    """The load's Jobs (and their ConfigMap and Service): applied at warm-up, deleted after."""
    spec = scenario.spec.load
    settings = stack.config.load
    if settings.placement != LoadPlacement.JOBS or spec.workload == "none" or spec.users <= 0:
        return []
    workers = max(1, spec.workers)
    # The port is chosen when the socket opens, unless the config fixes it.
    sink = advertised_sink(settings, settings.sink_port or -1).replace(":-1", ":<port>")
    objects = load_objects("faultday-load-<id>")
    ns = stack.namespace
    notes = [
        f"load config: master + {workers} worker{'s' if workers > 1 else ''}, events to {sink}",
        "load: the Locust master's address",
        "load: Locust master",
        f"load: {workers} worker pod{'s' if workers > 1 else ''} (Indexed)",
    ]
    out = [
        Touch("apply", kind, ns, name, f"{note}, at warm-up")
        for (_, kind, name), note in zip(objects, notes, strict=True)
    ]
    out += [
        Touch("delete", kind, ns, name, "load done (also on abort or error)")
        for _, kind, name in reversed(objects)
    ]
    return out


def component_pods(
    stack: KubernetesStack,
    component: str,
    cluster: KubernetesCluster | None,
    *,
    node: str | None = None,
) -> list[str]:
    """The component's pods (on ``node``): their names live, else their label selector."""
    if cluster is None:
        sel = stack.selector(component) + (f",spec.nodeName={node}" if node else "")
        return [f"-l {sel}"]
    return [p.name for p in cluster.list_pods(stack.namespace, component=component, node=node)]


def fault_touches(
    stack: KubernetesStack,
    fault: Fault,
    *,
    cluster: KubernetesCluster | None = None,
    registry: Registry[AnyInjector] | None = None,
) -> list[Touch]:
    """What one fault changes: a Kubernetes fault's objects, a proxy fault's sidecar; other
    injectors touch no object."""
    ns = stack.namespace
    why = f"fault {fault.name} at {fault.at:g}s"
    registry = registry or injector_registry()
    injector = registry.get(fault.inject)
    if is_kubernetes_fault(injector):
        instance = injector()
        if isinstance(instance, PlannedFault):
            return instance.touches(stack, fault, cluster=cluster)
        return [
            Touch("fault", "Pod", ns, p, f"{why}: {fault.inject} acts on these")
            for p in component_pods(stack, fault.target, cluster)
        ]
    if fault.target in stack.target_names() and "->" in fault.target:
        e = stack.target(fault.target)
        return [
            Touch(
                "toxic",
                "Toxiproxy",
                ns,
                f"{e.proxy_name} via {e.proxy_api}",
                f"{why}: {fault.inject}",
            )
        ]
    return [
        Touch("none", "-", ns, fault.target, f"{why}: {fault.inject} touches no cluster object")
    ]
