"""Dry run: exactly which cluster objects a stack (and a scenario's faults) would touch.

Without ``--live`` the plan is computed from the rendered manifests and the
scenario alone (no API call): pods appear as their label selector. With a
cluster connection, selectors are resolved to the pods and nodes they match now.
"""

from __future__ import annotations

from faultday.cluster.chaosmesh import ChaosMeshParams, object_name
from faultday.cluster.client import ClusterError, KubernetesCluster
from faultday.cluster.config import LoadPlacement
from faultday.cluster.kubernetes import KubernetesStack, Touch
from faultday.cluster.load_jobs import advertised_sink, load_objects
from faultday.core.scenario import Fault, Scenario

K8S_INJECTORS = frozenset({"pod_delete", "node_gpu_loss", "chaos_mesh"})


def plan(
    stack: KubernetesStack, *, scenario: Scenario | None = None, live: bool = False
) -> list[Touch]:
    """Driver actions (apply/delete) first, then each fault's objects in schedule order."""
    out = [t for t in stack.plan() if t.why == "up" or not scenario]
    if scenario is not None:
        load = load_touches(stack, scenario)
        out += [t for t in load if t.action == "apply"]
        for fault in sorted(scenario.spec.faults, key=lambda f: f.at):
            out += fault_touches(stack, fault, cluster=stack.cluster if live else None)
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


def _pods(
    stack: KubernetesStack,
    component: str,
    cluster: KubernetesCluster | None,
    *,
    node: str | None = None,
) -> list[str]:
    if cluster is None:
        sel = stack.selector(component) + (f",spec.nodeName={node}" if node else "")
        return [f"-l {sel}"]
    return [p.name for p in cluster.list_pods(stack.namespace, component=component, node=node)]


def fault_touches(
    stack: KubernetesStack, fault: Fault, *, cluster: KubernetesCluster | None = None
) -> list[Touch]:
    """What one fault changes. Proxy faults name the sidecar; other injectors touch no object."""
    ns = stack.namespace
    why = f"fault {fault.name} at {fault.at:g}s"
    w = fault.with_
    if fault.inject == "pod_delete":
        amount = f"{w['percent']}% of" if "percent" in w else f"{w.get('count', 1)} of"
        return [
            Touch("delete", "Pod", ns, p, f"{why}: {amount} these")
            for p in _pods(stack, fault.target, cluster)
        ]
    if fault.inject == "node_gpu_loss":
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
                for p in _pods(stack, fault.target, cluster, node=node or None)
            ]
        return [*out, Touch("untaint+uncordon", "Node", "", shown, f"revert of {fault.name}")]
    if fault.inject == "chaos_mesh":
        params = ChaosMeshParams.model_validate({k: v for k, v in w.items() if k != "gone_timeout"})
        name = object_name(fault.name, "<id>")
        return [
            Touch(
                "create",
                str(params.kind),
                ns,
                name,
                f"{why}: selects {stack.selector(fault.target)}",
            ),
            Touch("delete", str(params.kind), ns, name, f"revert of {fault.name}"),
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
