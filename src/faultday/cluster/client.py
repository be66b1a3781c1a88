"""A thin, guarded wrapper over the official ``kubernetes`` client.

Every mutating call checks the blast radius first, every call carries a
timeout, and API errors become ``ClusterError`` with the verb and object named.
Objects are applied with server-side apply (field manager ``faultday``), so a
second ``up`` is a no-op and nobody else's fields are overwritten.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from faultday.cluster.config import ClusterAccess
from faultday.cluster.guards import BlastRadius
from faultday.errors import FaultdayError

log = logging.getLogger(__name__)

FIELD_MANAGER = "faultday"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
CHAOS_GROUP = "chaos-mesh.org"
CHAOS_VERSION = "v1alpha1"

T = TypeVar("T")

# (apiVersion, kind) → (API class, snake-case resource name used in method names).
_KINDS: dict[tuple[str, str], tuple[str, str]] = {
    ("v1", "ConfigMap"): ("CoreV1Api", "config_map"),
    ("v1", "Service"): ("CoreV1Api", "service"),
    ("v1", "ServiceAccount"): ("CoreV1Api", "service_account"),
    ("apps/v1", "Deployment"): ("AppsV1Api", "deployment"),
    ("batch/v1", "Job"): ("BatchV1Api", "job"),
    ("rbac.authorization.k8s.io/v1", "Role"): ("RbacAuthorizationV1Api", "role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("RbacAuthorizationV1Api", "role_binding"),
}
# Deleted in this order at teardown: workloads before what they mount.
TEARDOWN_ORDER = ("Job", "Deployment", "Service", "ConfigMap")


class ClusterError(FaultdayError):
    """A Kubernetes API call failed (status and reason included)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class PodRef:
    name: str
    namespace: str
    node: str
    labels: Mapping[str, str]
    phase: str
    ready: bool
    restarts: int
    deleting: bool


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def to_api(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True, slots=True)
class NodeRef:
    name: str
    labels: Mapping[str, str]
    unschedulable: bool
    taints: tuple[Taint, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class DeploymentState:
    name: str
    replicas: int
    ready: int
    updated: int
    images: tuple[str, ...]

    @property
    def is_ready(self) -> bool:
        return self.ready >= self.replicas and self.updated >= self.replicas


@dataclass(frozen=True, slots=True)
class JobState:
    """What a Job's status says: pods active/succeeded/failed, and whether it has ended."""

    name: str
    completions: int
    active: int
    succeeded: int
    failed: int
    condition: str  # "Complete", "Failed" or "" while it runs
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.condition in ("Complete", "Failed")

    def describe(self) -> str:
        state = self.condition or "running"
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"{state}{why}: {self.succeeded}/{self.completions} succeeded, "
            f"{self.failed} failed, {self.active} active"
        )


def kind_supported(api_version: str, kind: str) -> bool:
    return (api_version, kind) in _KINDS


class KubernetesCluster:
    """One API connection plus the blast radius every change is checked against."""

    def __init__(self, access: ClusterAccess, guard: BlastRadius) -> None:
        self.access = access
        self.guard = guard
        self._api_client: Any = None

    # -- plumbing --------------------------------------------------------------------

    def _client(self) -> Any:
        if self._api_client is None:
            self._api_client = self.access.client()
        return self._api_client

    def api(self, name: str) -> Any:
        # Optional dependency: the kubernetes client (faultday[k8s]), for clusters only.
        from kubernetes import client  # noqa: PLC0415

        return getattr(client, name)(self._client())

    def close(self) -> None:
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    @property
    def timeout(self) -> float:
        return self.access.request_timeout

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        # Optional dependency: the kubernetes client (faultday[k8s]), for clusters only.
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
        from urllib3.exceptions import HTTPError  # noqa: PLC0415

        try:
            yield
        except ApiException as exc:
            reason = (exc.reason or "").strip()
            raise ClusterError(f"{what}: {exc.status} {reason}", status=exc.status or 0) from exc
        except HTTPError as exc:
            raise ClusterError(f"{what}: API server unreachable: {exc}") from exc

    def _do(self, what: str, fn: Callable[[], T]) -> T:
        with self._call(what):
            return fn()
        raise AssertionError("unreachable")  # pragma: no cover - _call re-raises

    # -- pods ------------------------------------------------------------------------

    def list_pods(
        self, namespace: str, *, component: str | None = None, node: str | None = None
    ) -> list[PodRef]:
        """Pods of the stack (the part-of selector is always applied), sorted by name."""
        self.guard.check_namespace(namespace)
        core = self.api("CoreV1Api")
        field_selector = f"spec.nodeName={node}" if node else None
        res = self._do(
            f"list pods in {namespace}",
            lambda: core.list_namespaced_pod(
                namespace,
                label_selector=self.guard.selector(component),
                field_selector=field_selector,
                _request_timeout=self.timeout,
            ),
        )
        return sorted((_pod_ref(p) for p in res.items or []), key=lambda p: p.name)

    def delete_pod(self, pod: PodRef, *, grace_period: int = 0) -> bool:
        """Delete one pod after the guard; False when it was already gone."""
        self.guard.check_object(
            kind="Pod", namespace=pod.namespace, name=pod.name, labels=pod.labels
        )
        core = self.api("CoreV1Api")
        try:
            self._do(
                f"delete pod {pod.namespace}/{pod.name}",
                lambda: core.delete_namespaced_pod(
                    pod.name,
                    pod.namespace,
                    grace_period_seconds=grace_period,
                    _request_timeout=self.timeout,
                ),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        log.info("deleted pod %s/%s", pod.namespace, pod.name)
        return True

    # -- nodes -----------------------------------------------------------------------

    def read_node(self, name: str) -> NodeRef:
        core = self.api("CoreV1Api")
        n = self._do(
            f"read node {name}", lambda: core.read_node(name, _request_timeout=self.timeout)
        )
        spec = n.spec
        taints = tuple(
            Taint(t.key, t.value or "", t.effect) for t in (spec.taints if spec else None) or []
        )
        return NodeRef(
            name=name,
            labels=dict(n.metadata.labels or {}),
            unschedulable=bool(spec.unschedulable) if spec else False,
            taints=taints,
        )

    def set_unschedulable(self, node: str, value: bool) -> None:
        """Cordon (True) or uncordon (False): a strategic-merge patch of one field."""
        core = self.api("CoreV1Api")
        body = {"spec": {"unschedulable": value}}
        verb = "cordon" if value else "uncordon"
        self._do(
            f"{verb} node {node}",
            lambda: core.patch_node(node, body, _request_timeout=self.timeout),
        )
        log.info("%s node %s", verb, node)

    def set_taints(self, node: str, taints: tuple[Taint, ...]) -> None:
        """Replace the node's taint list (taints have no merge key: the list is sent whole)."""
        core = self.api("CoreV1Api")
        body = {"spec": {"taints": [t.to_api() for t in taints]}}
        self._do(
            f"patch taints of node {node}",
            lambda: core.patch_node(node, body, _request_timeout=self.timeout),
        )

    # -- applied objects ----------------------------------------------------------------

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply of one namespaced object after the guard."""
        api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace")
        self.guard.check_object(
            kind=kind, namespace=namespace, name=name, labels=meta.get("labels")
        )
        api_name, resource = _kind(api_version, kind)
        method = getattr(self.api(api_name), f"patch_namespaced_{resource}")
        self._do(
            f"apply {kind} {namespace}/{name}",
            lambda: method(
                name,
                namespace,
                dict(obj),
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY_CONTENT_TYPE,
                _request_timeout=self.timeout,
            ),
        )
        log.info("applied %s %s/%s", kind, namespace, name)

    def delete(self, *, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one object we applied (foreground for workloads); False if already gone."""
        self.guard.check_namespace(namespace)
        api_name, resource = _kind(api_version, kind)
        method = getattr(self.api(api_name), f"delete_namespaced_{resource}")
        try:
            self._do(
                f"delete {kind} {namespace}/{name}",
                lambda: method(
                    name,
                    namespace,
                    propagation_policy="Foreground",
                    _request_timeout=self.timeout,
                ),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def read_labels(
        self, *, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, str] | None:
        """The object's labels, or None when it does not exist."""
        api_name, resource = _kind(api_version, kind)
        method = getattr(self.api(api_name), f"read_namespaced_{resource}")
        try:
            obj = self._do(
                f"read {kind} {namespace}/{name}",
                lambda: method(name, namespace, _request_timeout=self.timeout),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj.metadata.labels or {})

    def deployment(self, namespace: str, name: str) -> DeploymentState | None:
        apps = self.api("AppsV1Api")
        try:
            d = self._do(
                f"read deployment {namespace}/{name}",
                lambda: apps.read_namespaced_deployment(
                    name, namespace, _request_timeout=self.timeout
                ),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        status = d.status
        containers = d.spec.template.spec.containers if d.spec and d.spec.template else []
        return DeploymentState(
            name=name,
            replicas=d.spec.replicas if d.spec and d.spec.replicas is not None else 1,
            ready=(status.ready_replicas or 0) if status else 0,
            updated=(status.updated_replicas or 0) if status else 0,
            images=tuple(c.image for c in containers or []),
        )

    def job(self, namespace: str, name: str) -> JobState | None:
        """The Job's status, or None when it does not exist."""
        batch = self.api("BatchV1Api")
        try:
            j = self._do(
                f"read job {namespace}/{name}",
                lambda: batch.read_namespaced_job(name, namespace, _request_timeout=self.timeout),
            )
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        status = j.status
        condition, reason = "", ""
        for c in (status.conditions if status else None) or []:
            if c.type in ("Complete", "Failed") and c.status == "True":
                condition, reason = c.type, c.reason or ""
        return JobState(
            name=name,
            completions=(j.spec.completions or 1) if j.spec else 1,
            active=(status.active or 0) if status else 0,
            succeeded=(status.succeeded or 0) if status else 0,
            failed=(status.failed or 0) if status else 0,
            condition=condition,
            reason=reason,
        )

    def service_ports(self, namespace: str, name: str) -> dict[str, int]:
        core = self.api("CoreV1Api")
        s = self._do(
            f"read service {namespace}/{name}",
            lambda: core.read_namespaced_service(name, namespace, _request_timeout=self.timeout),
        )
        return {str(p.name or p.port): int(p.port) for p in (s.spec.ports or [])}

    def wait(
        self, what: str, check: Callable[[], bool], *, timeout: float, interval: float = 1.0
    ) -> None:
        """Poll ``check`` until true; ClusterError after ``timeout`` seconds (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            if check():
                return
            if time.monotonic() >= deadline:
                raise ClusterError(f"{what}: not within {timeout:g}s")
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))

    # -- Chaos Mesh custom objects --------------------------------------------------------

    def create_chaos(self, obj: Mapping[str, Any], *, plural: str) -> None:
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace")
        kind = str(obj.get("kind"))
        self.guard.check_object(
            kind=kind, namespace=namespace, name=name, labels=meta.get("labels")
        )
        custom = self.api("CustomObjectsApi")
        try:
            self._do(
                f"create {kind} {namespace}/{name}",
                lambda: custom.create_namespaced_custom_object(
                    CHAOS_GROUP,
                    CHAOS_VERSION,
                    namespace,
                    plural,
                    dict(obj),
                    _request_timeout=self.timeout,
                ),
            )
        except ClusterError as exc:
            if exc.status == 404:
                raise ClusterError(
                    f"Chaos Mesh is not installed: no {CHAOS_GROUP}/{CHAOS_VERSION} {plural} "
                    f"in the cluster ({exc})",
                    status=404,
                ) from exc
            raise

    def get_chaos(self, *, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self._named_chaos("get", namespace=namespace, plural=plural, name=name)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj) if isinstance(obj, dict) else {}

    def delete_chaos(self, *, namespace: str, plural: str, name: str) -> bool:
        self.guard.check_namespace(namespace)
        try:
            self._named_chaos("delete", namespace=namespace, plural=plural, name=name)
        except ClusterError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _named_chaos(self, verb: str, *, namespace: str, plural: str, name: str) -> Any:
        """``verb`` (get, delete) one Chaos Mesh object; ClusterError (404) when there is none."""
        method = getattr(self.api("CustomObjectsApi"), f"{verb}_namespaced_custom_object")
        return self._do(
            f"{verb} {plural} {namespace}/{name}",
            lambda: method(
                CHAOS_GROUP,
                CHAOS_VERSION,
                namespace,
                plural,
                name,
                _request_timeout=self.timeout,
            ),
        )


def _kind(api_version: str, kind: str) -> tuple[str, str]:
    try:
        return _KINDS[(api_version, kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} ({v})" for v, k in _KINDS))
        raise ClusterError(
            f"faultday does not apply {kind} ({api_version}); it applies {known}"
        ) from None


def _pod_ref(p: Any) -> PodRef:
    status = p.status
    conds = (status.conditions if status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conds)
    restarts = (
        sum(cs.restart_count or 0 for cs in (status.container_statuses or [])) if status else 0
    )
    return PodRef(
        name=p.metadata.name,
        namespace=p.metadata.namespace or "",
        node=(p.spec.node_name or "") if p.spec else "",
        labels=dict(p.metadata.labels or {}),
        phase=(status.phase or "") if status else "",
        ready=ready,
        restarts=restarts,
        deleting=p.metadata.deletion_timestamp is not None,
    )
