"""A Kubernetes API stand-in: no cluster can run here, so the tests talk to this.

A real HTTP server on 127.0.0.1 (ThreadingHTTPServer) that implements the few
REST paths the official ``kubernetes`` client calls for faultday: pods
list/delete, nodes get/patch, server-side apply / read / delete of ConfigMaps,
Services, Deployments, Jobs and RBAC objects, and chaos-mesh.org/v1alpha1
custom objects. It records every call in order, and can be told to fail a call.
A minimal Deployment controller makes pods for applied Deployments and
replaces deleted pods, so readiness waits and restarts have something to see.

A minimal Job controller (a kubelet, really) runs each pod of an applied Job as
a LOCAL PROCESS: the container's command, with every ConfigMap volume written
to a folder that stands in for its mountPath, Services resolved to 127.0.0.1
(each Service port gets a free local port, used for its pods' targetPort too,
since pods here share one network), 0.0.0.0 narrowed to 127.0.0.1, ``python``
being this interpreter, ``JOB_COMPLETION_INDEX`` set for Indexed Jobs. Job
status (active/succeeded/failed, Complete/Failed conditions) follows the
processes; ``activeDeadlineSeconds`` and a failed pod (backoffLimit) end the
Job like the real controller; deleting the Job kills its processes.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
class PodRun:
    """One pod of a Job, run as a local process."""

    job: str
    namespace: str
    index: int
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log: Path
    started: float

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()


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
    run_jobs: bool = True  # run each Job pod's command as a local process
    pods_run: list[PodRun] = field(default_factory=list)  # every pod process ever started
    local_ports: dict[tuple[str, str, int], int] = field(default_factory=dict)  # svc port → local
    job_pods: dict[tuple[str, str], list[PodRun]] = field(default_factory=dict)  # live Jobs


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
        self._workdir = Path(tempfile.mkdtemp(prefix="kube-standin-"))
        self._stop_jobs = threading.Event()
        self._jobs_thread = threading.Thread(
            target=self._job_loop, name="standin-jobs", daemon=True
        )

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
        self._jobs_thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stop_jobs.set()
        if self._jobs_thread.is_alive():
            self._jobs_thread.join(timeout=5)
        with self.lock:
            runs = list(self.state.pods_run)
        for run in runs:
            _kill(run.proc, grace=0.0)
        shutil.rmtree(self._workdir, ignore_errors=True)

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
            if plural == "jobs" and self.state.run_jobs and not self._pods_of(ns, name or ""):
                self._job_controller(ns, obj)
            return 200, copy.deepcopy(obj)
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
            if plural == "jobs":
                for run in self.state.job_pods.pop((ns, name or ""), []):
                    _kill(run.proc, grace=2.0)  # foreground deletion: the pods go first
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

    # -- a tiny Job controller and kubelet: pods as local processes --------------------
    def _pods_of(self, ns: str, job: str) -> list[PodRun]:
        return self.state.job_pods.get((ns, job), [])

    def pod_runs(self, job: str | None = None) -> list[PodRun]:
        with self.lock:
            return [r for r in self.state.pods_run if job is None or r.job == job]

    def _job_controller(self, ns: str, job: Json) -> None:
        name = job["metadata"]["name"]
        spec = job["spec"]
        pod = spec["template"]["spec"]
        n = int(spec.get("completions", 1))
        indexed = spec.get("completionMode") == "Indexed"
        runs = []
        for i in range(n):
            pod_dir = self._workdir / f"{ns}-{name}-{i}"
            pod_dir.mkdir(parents=True, exist_ok=True)
            mounts = self._mount_config_maps(ns, pod, pod_dir)
            ports = self._ports_for(ns, spec["template"]["metadata"].get("labels") or {})
            container = pod["containers"][0]
            argv = [self._localize(ns, a, mounts, ports) for a in container["command"]]
            env = {
                **os.environ,
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
            }
            if indexed:
                env["JOB_COMPLETION_INDEX"] = str(i)
            log = pod_dir / "pod.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(
                    argv,
                    cwd=pod_dir,
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            runs.append(PodRun(name, ns, i, argv, proc, log, time.monotonic()))
        self.state.job_pods[(ns, name)] = runs
        self.state.pods_run += runs
        job["status"] = {"active": n, "startTime": "2024-01-01T00:00:00Z"}

    def _mount_config_maps(self, ns: str, pod: Json, pod_dir: Path) -> dict[str, Path]:
        """mountPath → a folder holding the ConfigMap's keys as files."""
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        out = {}
        for m in pod["containers"][0].get("volumeMounts") or []:
            cm_name = (volumes.get(m["name"]) or {}).get("configMap", {}).get("name")
            cm = self.state.objects.get((ns, "configmaps", cm_name or ""))
            if cm is None:
                continue  # a real pod would wait in ContainerCreating; its Job never ends
            folder = pod_dir / m["name"]
            folder.mkdir(exist_ok=True)
            for key, value in (cm.get("data") or {}).items():
                (folder / key).write_text(value)
            out[m["mountPath"]] = folder
        return out

    def _ports_for(self, ns: str, pod_labels: dict[str, str]) -> dict[str, dict[int, int]]:
        """Per Service: its port → a local port; ``""`` holds the targetPorts of this pod."""
        out: dict[str, dict[int, int]] = {"": {}}
        for (ons, plural, svc_name), svc in self.state.objects.items():
            if ons != ns or plural != "services":
                continue
            selected = _match(pod_labels, _labels_sel(svc["spec"].get("selector") or {}))
            for port in svc["spec"].get("ports") or []:
                key = (ns, svc_name, int(port["port"]))
                if key not in self.state.local_ports:
                    self.state.local_ports[key] = _free_port()
                local = self.state.local_ports[key]
                out.setdefault(svc_name, {})[int(port["port"])] = local
                if selected:
                    out[""][int(port.get("targetPort", port["port"]))] = local
        return out

    def _localize(
        self, ns: str, arg: str, mounts: dict[str, Path], ports: dict[str, dict[int, int]]
    ) -> str:
        for mount, folder in mounts.items():
            arg = re.sub(rf"{re.escape(mount)}(?=/|\b)", str(folder), arg)
        arg = arg.replace("0.0.0.0", "127.0.0.1")
        for svc, mapping in ports.items():
            if not svc:
                continue
            dns = rf"(?:\.{re.escape(ns)}(?:\.svc(?:\.cluster\.local)?)?)?"
            host = rf"(?<![\w.-]){re.escape(svc)}{dns}(?![\w.-])"
            if re.search(host, arg):
                arg = re.sub(host, "127.0.0.1", arg)
                for port, local in mapping.items():
                    arg = re.sub(rf"(?<!\d){port}(?!\d)", str(local), arg)
        for port, local in ports[""].items():
            arg = re.sub(rf"(?<!\d){port}(?!\d)", str(local), arg)
        return arg

    def _job_loop(self) -> None:
        while not self._stop_jobs.wait(0.1):
            with self.lock:
                for (ns, name), runs in list(self.state.job_pods.items()):
                    job = self.state.objects.get((ns, "jobs", name))
                    if job is not None:
                        self._job_status(job, runs)

    def _job_status(self, job: Json, runs: list[PodRun]) -> None:
        status = job.setdefault("status", {})
        if any(c.get("status") == "True" for c in status.get("conditions") or []):
            return
        spec = job["spec"]
        codes = [r.returncode for r in runs]
        succeeded = sum(1 for c in codes if c == 0)
        failed = sum(1 for c in codes if c not in (None, 0))
        active = sum(1 for c in codes if c is None)
        status.update(active=active, succeeded=succeeded, failed=failed)
        deadline = spec.get("activeDeadlineSeconds")
        age = time.monotonic() - min(r.started for r in runs)
        reason = ""
        if failed > int(spec.get("backoffLimit", 6)):
            reason = "BackoffLimitExceeded"
        elif deadline is not None and age > float(deadline) and active:
            reason = "DeadlineExceeded"
        if reason:
            for r in runs:
                _kill(r.proc, grace=0.0)
            status.update(active=0, conditions=[_cond("Failed", reason)])
        elif succeeded >= int(spec.get("completions", 1)):
            status["conditions"] = [_cond("Complete", "")]


def _cond(kind: str, reason: str) -> Json:
    out = {"type": kind, "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    if reason:
        out["reason"] = reason
    return out


def _labels_sel(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill(proc: subprocess.Popen[bytes], *, grace: float) -> None:
    """TERM the pod's process group, KILL it after ``grace`` seconds; always reaped."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM if grace else signal.SIGKILL)
    try:
        proc.wait(grace or 5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


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
