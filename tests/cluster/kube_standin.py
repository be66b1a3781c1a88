"""A Kubernetes API stand-in: no cluster can run here, so the tests talk to this.

A real HTTP server on 127.0.0.1 (ThreadingHTTPServer) that implements the few
REST paths the official ``kubernetes`` client calls for faultday: pods
list/delete, nodes get/patch, server-side apply / read / delete of ConfigMaps,
Services, Deployments, Jobs and RBAC objects, and chaos-mesh.org/v1alpha1
custom objects. It records every call in order, and can be told to fail a call.
A minimal Deployment controller makes pods for applied Deployments and
replaces deleted pods, so readiness waits and restarts have something to see.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Json = dict[str, Any]

_NS_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/"
    r"(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)
_NODE_PATH = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(slots=True)
class Failure:
    method: str
    path: str  # regex, full match
    status: int = 500
    times: int = 1
    when: Callable[[Any], bool] = lambda _body: True


@dataclass(slots=True)
class State:
    objects: dict[tuple[str, str, str], Json] = field(default_factory=dict)  # (ns, plural, name)
    nodes: dict[str, Json] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    chaos_installed: bool = True
    chaos_linger: int = 0  # GETs a deleted chaos object still answers (finalizers)
    lingering: dict[tuple[str, str, str], int] = field(default_factory=dict)
    auto_ready: bool = True
    recreate_pods: bool = True
    pod_node: str = "gpu-node-1"
    seq: Any = field(default_factory=lambda: itertools.count(1))


def _status(code: int, reason: str, message: str) -> Json:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _match(labels: dict[str, str], selector: str) -> bool:
    for part in filter(None, selector.split(",")):
        k, _, v = part.partition("=")
        if labels.get(k) != v:
            return False
    return True


class KubeStandIn:
    """Start with ``start()``; ``url`` is the API base URL; ``stop()`` shuts it down."""

    def __init__(self) -> None:
        self.state = State()
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------
    def start(self) -> KubeStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                ctype = self.headers.get("Content-Type") or ""
                code, out = standin.handle(self.command, parts.path, query, ctype, body)
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def calls(self, *, mutating: bool = False) -> list[str]:
        with self.lock:
            out = [str(c) for c in self.state.calls]
        if mutating:
            out = [c for c in out if not c.startswith("GET ")]
        return out

    def fail(
        self,
        method: str,
        path: str,
        *,
        status: int = 500,
        times: int = 1,
        when: Callable[[Any], bool] = lambda _b: True,
    ) -> None:
        with self.lock:
            self.state.failures.append(Failure(method, path, status, times, when))

    def add_node(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        unschedulable: bool = False,
        taints: list[Json] | None = None,
    ) -> None:
        spec: Json = {"unschedulable": unschedulable} if unschedulable else {}
        if taints:
            spec["taints"] = taints
        with self.lock:
            self.state.nodes[name] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels or {}},
                "spec": spec,
            }

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        labels: dict[str, str],
        node: str = "gpu-node-1",
        ready: bool = True,
    ) -> None:
        with self.lock:
            self.state.objects[(namespace, "pods", name)] = self._pod(
                namespace, name, labels, node, ready
            )

    def node(self, name: str) -> Json:
        with self.lock:
            return copy.deepcopy(self.state.nodes[name])

    def objects(self, plural: str, namespace: str | None = None) -> dict[str, Json]:
        with self.lock:
            return {
                n: copy.deepcopy(o)
                for (ns, p, n), o in self.state.objects.items()
                if p == plural and (namespace is None or ns == namespace)
            }

    # -- the API ---------------------------------------------------------------------
    def handle(
        self, method: str, path: str, query: dict[str, str], ctype: str, body: Any
    ) -> tuple[int, Json]:
        with self.lock:
            self.state.calls.append(Call(method, path, query, ctype, body))
            for f in self.state.failures:
                if (
                    f.times > 0
                    and f.method == method
                    and re.fullmatch(f.path, path)
                    and f.when(body)
                ):
                    f.times -= 1
                    return f.status, _status(
                        f.status, "InternalError", f"injected failure of {method} {path}"
                    )
            if m := _NODE_PATH.match(path):
                return self._node(method, m["name"], body)
            if m := _NS_PATH.match(path):
                return self._namespaced(
                    method, m["group"], m["ns"], m["plural"], m["name"], query, ctype, body
                )
            return 404, _status(404, "NotFound", f"no route {method} {path}")

    def _node(self, method: str, name: str, body: Any) -> tuple[int, Json]:
        node = self.state.nodes.get(name)
        if node is None:
            return 404, _status(404, "NotFound", f"nodes {name!r} not found")
        if method == "PATCH":
            for k, v in (body.get("spec") or {}).items():
                node["spec"][k] = v  # taints have no merge key: the list is replaced whole
        return 200, copy.deepcopy(node)

    def _namespaced(  # noqa: PLR0911, PLR0912, PLR0917 - one branch per verb, like the API
        self,
        method: str,
        group: str | None,
        ns: str,
        plural: str,
        name: str | None,
        query: dict[str, str],
        ctype: str,
        body: Any,
    ) -> tuple[int, Json]:
        if group == "chaos-mesh.org" and not self.state.chaos_installed:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        key = (ns, plural, name or "")
        if name is None and method == "GET":
            return 200, self._list(ns, plural, query)
        if name is None and method == "POST":
            name = body["metadata"]["name"]
            key = (ns, plural, name)
            if key in self.state.objects:
                return 409, _status(409, "AlreadyExists", f"{plural} {name!r} already exists")
            obj = copy.deepcopy(body)
            obj["metadata"].setdefault("namespace", ns)
            self.state.objects[key] = obj
            return 201, obj
        if method == "PATCH":
            if "apply-patch" not in ctype or query.get("fieldManager") != "faultday":
                return 415, _status(415, "UnsupportedMediaType", f"stand-in only applies ({ctype})")
            obj = _quantities(copy.deepcopy(body))
            obj["metadata"].setdefault("namespace", ns)
            self.state.objects[key] = obj
            if plural == "deployments":
                self._deployment_controller(ns, obj)
            return 200, obj
        obj = self.state.objects.get(key)
        if obj is None:
            if method == "GET" and self.state.lingering.get(key, 0) > 0:
                self.state.lingering[key] -= 1
                return 200, {
                    "apiVersion": "chaos-mesh.org/v1alpha1",
                    "metadata": {"name": name, "deletionTimestamp": "2024-01-01T00:00:00Z"},
                }
            return 404, _status(404, "NotFound", f"{plural} {name!r} not found")
        if method == "GET":
            return 200, copy.deepcopy(obj)
        if method == "DELETE":
            del self.state.objects[key]
            if group == "chaos-mesh.org" and self.state.chaos_linger:
                self.state.lingering[key] = self.state.chaos_linger
            if plural == "pods" and self.state.recreate_pods:
                self._replace_pod(ns, obj)
            if plural == "deployments":
                for n, p in list(self.objects("pods", ns).items()):
                    if _match(p["metadata"]["labels"], _sel(obj)):
                        del self.state.objects[(ns, "pods", n)]
            return 200, obj
        return 405, _status(405, "MethodNotAllowed", method)

    def _list(self, ns: str, plural: str, query: dict[str, str]) -> Json:
        sel = query.get("labelSelector", "")
        fsel = query.get("fieldSelector", "")
        items = []
        for (ons, p, _n), o in sorted(self.state.objects.items()):
            if ons != ns or p != plural or not _match(o["metadata"].get("labels") or {}, sel):
                continue
            if (
                fsel.startswith("spec.nodeName=")
                and o["spec"].get("nodeName") != fsel.split("=", 1)[1]
            ):
                continue
            items.append(copy.deepcopy(o))
        kind = {"pods": "PodList", "deployments": "DeploymentList"}.get(plural, "List")
        return {"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items}

    # -- a tiny Deployment controller ------------------------------------------------
    def _pod(self, ns: str, name: str, labels: dict[str, str], node: str, ready: bool) -> Json:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def _deployment_controller(self, ns: str, dep: Json) -> None:
        labels = dep["spec"]["template"]["metadata"]["labels"]
        existing = [
            p
            for (ons, pl, _), p in self.state.objects.items()
            if ons == ns and pl == "pods" and _match(p["metadata"]["labels"], _sel(dep))
        ]
        if not existing:
            pod_name = f"{dep['metadata']['name']}-{next(self.state.seq):05d}"
            self.state.objects[(ns, "pods", pod_name)] = self._pod(
                ns, pod_name, labels, self.state.pod_node, self.state.auto_ready
            )
        n = dep["spec"].get("replicas", 1)
        ready = n if self.state.auto_ready else 0
        dep["status"] = {"replicas": n, "readyReplicas": ready, "updatedReplicas": ready}

    def set_ready(self, ns: str, deployment: str, ready: bool = True) -> None:
        with self.lock:
            dep = self.state.objects[(ns, "deployments", deployment)]
            n = dep["spec"].get("replicas", 1)
            dep["status"] = {
                "replicas": n,
                "readyReplicas": n if ready else 0,
                "updatedReplicas": n if ready else 0,
            }

    def _replace_pod(self, ns: str, old: Json) -> None:
        labels = old["metadata"]["labels"]
        owner = labels.get("app.kubernetes.io/name", "pod")
        new = f"{owner}-{next(self.state.seq):05d}"
        self.state.objects[(ns, "pods", new)] = self._pod(
            ns, new, labels, self.state.pod_node, True
        )


def _sel(dep: Json) -> str:
    return ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())


def _quantities(node: Any, key: str = "") -> Any:
    """Like the API server: resource quantities come back as strings (1 → "1")."""
    if isinstance(node, dict):
        if key in ("limits", "requests"):
            return {k: str(v) for k, v in node.items()}
        return {k: _quantities(v, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_quantities(v) for v in node]
    return node
