"""The Kubernetes driver: a stack profile as Deployments and Services in one namespace.

``deploy`` mode applies the manifests of ``faultday.cluster.k8s_render`` (what
``faultday stack render --driver k8s`` writes), waits until every Deployment is
ready, and deletes them at ``down``. ``attach`` mode uses a stack that is
already running (the user's own, labelled ``app.kubernetes.io/part-of``) and
changes nothing at ``up``/``down``. Either way the offered API is the process
driver's: ``up/down/restart/target/target_names/endpoints/versions/describe``.

Edges run through the Toxiproxy sidecar of their destination's pod: an edge
target names that sidecar's API, so the proxy injectors work unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import secrets
import select
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import yaml

from faultday.cluster.cleanup import stack_cleanup_record
from faultday.cluster.client import TEARDOWN_ORDER, ClusterError, KubernetesCluster
from faultday.cluster.config import (
    NAME_LABEL,
    PART_OF_LABEL,
    STACK_RUN_LABEL,
    DeployMode,
    EndpointMode,
    KubernetesConfig,
    LoadPlacement,
    load_config,
)
from faultday.cluster.guards import BlastRadius
from faultday.cluster.k8s_render import manifests
from faultday.cluster.load_jobs import KubernetesLoad
from faultday.cluster.official_images import TOXIPROXY_API_PORT
from faultday.core.driverbase import DriverBase
from faultday.core.ledger import Ledger, ProcessRecord
from faultday.core.plugins import did_you_mean
from faultday.core.profile import StackProfile
from faultday.core.stackinfo import StackInfo
from faultday.core.targets import Revert, Target
from faultday.errors import StackError

if TYPE_CHECKING:
    from faultday.cluster.load_jobs import KubernetesLoad
    from faultday.core.scenario import LoadSpec
    from faultday.core.scenario import Scenario as ScenarioModel
    from faultday.load.runner import LoadOptions

log = logging.getLogger(__name__)

APPLY_ORDER = ("ServiceAccount", "ConfigMap", "Service", "Deployment", "Job")
PORT_FORWARD_TIMEOUT = 20.0
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) ->")


@dataclass(frozen=True, slots=True)
class Touch:
    """One object a driver action or a fault would change (``faultday k8s plan``)."""

    action: str  # apply, delete, cordon+taint, create, …
    kind: str
    namespace: str
    name: str
    why: str = ""

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        why = f"  # {self.why}" if self.why else ""
        return f"{self.action:<14} {self.kind:<12} {where}{self.name}{why}"


def _relabel(node: object, part_of: str) -> Any:
    if isinstance(node, dict):
        return {
            k: (part_of if k == PART_OF_LABEL else _relabel(v, part_of)) for k, v in node.items()
        }
    if isinstance(node, list):
        return [_relabel(v, part_of) for v in node]
    return node


def place(
    docs: Iterable[Mapping[str, object]], *, namespace: str, part_of: str
) -> list[dict[str, Any]]:
    """Copies of ``docs`` with every object's namespace and part-of label, ordered for apply."""
    out = []
    for raw in docs:
        d = _relabel(raw, part_of)
        d["metadata"]["namespace"] = namespace
        d["metadata"].setdefault("labels", {})[PART_OF_LABEL] = part_of
        out.append(d)
    rank = {k: i for i, k in enumerate(APPLY_ORDER)}
    return sorted(out, key=lambda d: rank.get(str(d.get("kind")), len(rank)))


class KubernetesStack(DriverBase):
    """A stack profile on a Kubernetes cluster (deploy or attach)."""

    driver = "kubernetes"

    @staticmethod
    def load_config(path: Path) -> KubernetesConfig:
        """The driver's settings file (``faultday run --driver-config``)."""

        return load_config(path)

    def __init__(
        self,
        profile: StackProfile,
        *,
        run_dir: Path,
        ledger: Ledger,
        policy: str | None = None,
        config: KubernetesConfig | None = None,
        cluster: KubernetesCluster | None = None,
    ) -> None:
        # No trace wiring on Kubernetes yet (docs/traces.md): the collector is left out.
        profile = profile.without_collector()
        super().__init__(profile, run_dir=run_dir, ledger=ledger, policy=policy)
        self.config = config or KubernetesConfig()
        self.namespace = self.config.namespace
        self.part_of = self.config.part_of_for(profile.name)
        self.guard = BlastRadius(self.config.namespaces(), self.part_of)
        self.guard.check_namespace(self.namespace)
        self.cluster = cluster or KubernetesCluster(self.config.access, self.guard)
        self._edges = {e.name: e for e in profile.edges()} if profile.spec.proxy else {}
        self._docs = place(manifests(profile), namespace=self.namespace, part_of=self.part_of)
        self._forwards: dict[tuple[str, int], tuple[subprocess.Popen[bytes], int]] = {}
        self._load_docs: list[dict[str, Any]] = []  # load Jobs etc. not yet deleted
        self._load_deleted: list[Callable[[], None]] = []  # told when they all are
        self._up = False
        self._cleanup: Revert | None = None  # outstanding in the ledger until down() is clean

    # -- what the manifests say -------------------------------------------------------

    def manifests(self) -> list[dict[str, Any]]:
        return [dict(d) for d in self._docs]

    def components(self) -> list[str]:
        """Components that run as Deployments (the proxy is a sidecar on Kubernetes)."""
        deps = {d["metadata"]["name"] for d in self._docs if d.get("kind") == "Deployment"}
        return [c for c in self.profile.spec.components if c in deps]

    def _doc(self, kind: str, name: str) -> dict[str, Any] | None:
        return next(
            (d for d in self._docs if d.get("kind") == kind and d["metadata"]["name"] == name),
            None,
        )

    def _service_port(self, component: str) -> int:
        svc = self._doc("Service", component)
        if svc is None:
            raise StackError(f"component {component!r} has no Service in the rendered manifests")
        return int(svc["spec"]["ports"][0]["port"])

    def _edge_port(self, edge: str) -> int:
        e = self._edges[edge]
        cm = self._doc("ConfigMap", f"{e.dst}-toxiproxy")
        if cm is not None:
            for p in yaml.safe_load(cm["data"]["toxiproxy.json"]):
                if p["name"] == e.proxy_name:
                    return int(str(p["listen"]).rsplit(":", 1)[1])
        raise StackError(f"edge {edge!r} has no Toxiproxy sidecar listener in the manifests")

    def target_names(self) -> list[str]:
        return [*self.components(), *self._edges]

    # -- addresses ----------------------------------------------------------------------

    def _dns(self, component: str) -> str:
        return f"{component}.{self.namespace}.svc.cluster.local"

    def _address(self, component: str, port: int) -> str:
        """host:port at which the harness reaches ``component``'s Service port."""
        if self.config.endpoints == EndpointMode.PORT_FORWARD:
            return f"127.0.0.1:{self._forward(component, port)}"
        return f"{self._dns(component)}:{port}"

    def _scheme(self, component: str) -> str:
        return self.profile.ctype(component).scheme

    def endpoints(self) -> dict[str, str]:
        out = {}
        for c in self.components():
            if c in self.config.endpoint_overrides:
                out[c] = self.config.endpoint_overrides[c]
            else:
                out[c] = f"{self._scheme(c)}://{self._address(c, self._service_port(c))}"
        return out

    def load_endpoints(self) -> dict[str, str]:
        """component → URL as the load pods see it: Service DNS, or ``load.endpoints``."""
        out = {
            c: f"{self._scheme(c)}://{self._dns(c)}:{self._service_port(c)}"
            for c in self.components()
        }
        out.update(self.config.load.endpoints)
        return out

    def _proxy_api(self, dst: str) -> str:
        if dst in self.config.proxy_overrides:
            return self.config.proxy_overrides[dst]
        return f"http://{self._address(dst, TOXIPROXY_API_PORT)}"

    # -- port-forward ---------------------------------------------------------------------

    def port_forward_argv(self, component: str, port: int) -> list[str]:
        argv = ["kubectl", "port-forward", "-n", self.namespace, f"svc/{component}", f":{port}"]
        if self.config.access.context:
            argv += ["--context", self.config.access.context]
        if self.config.access.kubeconfig:
            argv += ["--kubeconfig", self.config.access.kubeconfig]
        return argv

    def _forward(self, component: str, port: int) -> int:
        key = (component, port)
        if key in self._forwards and self._forwards[key][0].poll() is None:
            return self._forwards[key][1]
        name = f"port-forward/{component}:{port}"
        # The intent (and the marker the child carries) is on disk before it exists.
        env = {**os.environ, **self.ledger.add_spawn(name)}
        proc = subprocess.Popen(
            self.port_forward_argv(component, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        self.ledger.add_process(
            ProcessRecord(
                component=name,
                pid=proc.pid,
                pgid=proc.pid,
                create_time=psutil.Process(proc.pid).create_time(),
            )
        )
        local = _read_forward_port(proc, timeout=PORT_FORWARD_TIMEOUT)
        if local is None:
            self._stop_forward(proc)
            raise StackError(f"kubectl port-forward svc/{component}:{port} gave no local port")
        self._forwards[key] = (proc, local)
        return local

    def _stop_forward(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
        self.ledger.process_stopped(proc.pid)

    # -- lifecycle ------------------------------------------------------------------------

    def up(self, *, timeout: float | None = None) -> None:
        """Deploy (or check the attached stack), then wait until every Deployment is ready."""
        if self._up:
            raise StackError("the stack is already up")
        limit = timeout if timeout is not None else self.config.ready_timeout
        try:
            if self.config.mode == DeployMode.DEPLOY:
                run = self._record_deploy()
                for doc in self._docs:
                    self.cluster.apply(_owned(doc, run))
            else:
                self._check_attached()
            self._wait_ready(self.components(), limit)
        except ClusterError as exc:
            if self.config.mode == DeployMode.DEPLOY:
                try:
                    self.down()
                except StackError as down_exc:
                    # The first failure is the one to report; the leftovers are logged.
                    log.error("after a failed up: %s", down_exc)  # noqa: TRY400 - no traceback wanted
            raise StackError(str(exc)) from exc
        self._up = True

    def _teardown_docs(self) -> list[dict[str, Any]]:
        rank = {k: i for i, k in enumerate(TEARDOWN_ORDER)}
        return sorted(self._docs, key=lambda d: rank.get(str(d["kind"]), len(rank)))

    def _record_deploy(self) -> str:
        """Record, then act: on disk (fsynced) before the first apply, so ``faultday recover``
        deletes the stack after a killed harness. Returns this deploy's ``stack-run`` label."""
        if self._cleanup is not None:  # an earlier deploy's record stays until down() is clean
            return str(self._cleanup.data["run"])
        run = secrets.token_hex(4)
        self._cleanup = stack_cleanup_record(
            access=self.config.access,
            guard=self.guard,
            namespace=self.namespace,
            run=run,
            docs=self._teardown_docs(),
        )
        self.ledger.add_cleanup(self._cleanup)
        return run

    def _check_attached(self) -> None:
        for c in self.components():
            labels = self.cluster.read_labels(
                api_version="apps/v1", kind="Deployment", namespace=self.namespace, name=c
            )
            if labels is None:
                raise StackError(f"attach: no Deployment {self.namespace}/{c}")
            self.guard.check_object(
                kind="Deployment", namespace=self.namespace, name=c, labels=labels
            )

    def _wait_ready(self, components: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for c in components:

            def ready(c: str = c) -> bool:
                d = self.cluster.deployment(self.namespace, c)
                return d is not None and d.is_ready

            self.cluster.wait(
                f"deployment {self.namespace}/{c} ready",
                ready,
                timeout=max(0.1, deadline - time.monotonic()),
            )
            log.info("%s ready", c)

    def down(self) -> None:
        """Stop port-forwards; delete load objects left over; in deploy mode delete what was
        applied. Idempotent."""
        for proc, _ in self._forwards.values():
            self._stop_forward(proc)
        self._forwards.clear()
        self._up = False
        errors = self._delete_load_leftovers()
        if self.config.mode != DeployMode.DEPLOY:
            if errors:
                raise StackError("teardown incomplete: " + "; ".join(errors))
            return
        stack_errors = []
        for d in self._teardown_docs():
            try:
                self.cluster.delete(
                    api_version=d["apiVersion"],
                    kind=d["kind"],
                    namespace=self.namespace,
                    name=d["metadata"]["name"],
                )
            except ClusterError as exc:
                stack_errors.append(str(exc))
        if not stack_errors and self._cleanup is not None:
            self.ledger.cleanup_done(self._cleanup, ok=True)
            self._cleanup = None
        errors += stack_errors
        if errors:
            raise StackError("teardown incomplete: " + "; ".join(errors))

    # -- distributed load (Locust as Jobs) -------------------------------------------------

    def load_participant(self, spec: LoadSpec, options: LoadOptions) -> KubernetesLoad | None:
        """The scenario's load as Jobs in the namespace (None: run it beside the harness)."""
        if self.config.load.placement != LoadPlacement.JOBS:
            return None

        return KubernetesLoad(self, spec, options)

    def track_load(
        self, docs: list[dict[str, Any]], *, on_deleted: Callable[[], None] | None = None
    ) -> None:
        """Load objects about to be applied: ``down`` deletes any the load did not, then calls
        ``on_deleted`` (which marks the load's ledger record done)."""
        self._load_docs += [d for d in docs if d not in self._load_docs]
        if on_deleted is not None:
            self._load_deleted.append(on_deleted)

    def forget_load(
        self, docs: list[dict[str, Any]], *, on_deleted: Callable[[], None] | None = None
    ) -> None:
        self._load_docs = [d for d in self._load_docs if d not in docs]
        if on_deleted in self._load_deleted:
            self._load_deleted.remove(on_deleted)

    def _delete_load_leftovers(self) -> list[str]:
        errors = []
        for d in reversed(self._load_docs):
            try:
                gone = self.cluster.delete(
                    api_version=d["apiVersion"],
                    kind=d["kind"],
                    namespace=d["metadata"]["namespace"],
                    name=d["metadata"]["name"],
                )
            except ClusterError as exc:
                errors.append(str(exc))
                continue
            if gone:
                log.warning("deleted leftover load object %s/%s", d["kind"], d["metadata"]["name"])
        if not errors:
            self._load_docs = []
            for done in self._load_deleted:
                done()
            self._load_deleted = []
        return errors

    def restart(self, component: str, *, timeout: float) -> None:
        """Delete the component's pods; its Deployment makes new ones; wait until ready."""
        self._check_component(component)
        old = {p.name for p in self.cluster.list_pods(self.namespace, component=component)}
        for p in self.cluster.list_pods(self.namespace, component=component):
            self.cluster.delete_pod(p)

        def fresh_and_ready() -> bool:
            pods = self.cluster.list_pods(self.namespace, component=component)
            new = [p for p in pods if p.name not in old and not p.deleting]
            d = self.cluster.deployment(self.namespace, component)
            return bool(new) and all(p.ready for p in new) and d is not None and d.is_ready

        try:
            self.cluster.wait(f"{component} restarted", fresh_and_ready, timeout=timeout)
        except ClusterError as exc:
            raise StackError(str(exc)) from exc

    def pause(self, component: str) -> None:
        raise StackError(
            f"pause is not supported on Kubernetes ({component}); "
            "use chaos_mesh with kind PodChaos, action pod-failure"
        )

    resume = pause

    def _check_component(self, component: str) -> None:
        comps = set(self.components())
        if component not in comps:
            raise StackError(f"no component {component!r}{did_you_mean(component, comps)}")

    # -- targets and descriptions ------------------------------------------------------

    def target(self, name: str) -> Target:
        if name in self.components():
            url = self.endpoints()[name]
            # The base URL, as the other drivers give it: injectors append their own admin
            # paths (/admin/faults/…); the full path here doubled it.
            return self._component_target(
                name, url=url, admin_url=url if self.profile.ctype(name).admin_path else ""
            )
        if name in self._edges:
            e = self._edges[name]
            return self._edge_target(
                e,
                url=f"{self._dns(e.dst)}:{self._edge_port(name)}",
                proxy_api=self._proxy_api(e.dst),
                upstream=f"127.0.0.1:{self._service_port(e.dst)}",
            )
        names = set(self.target_names())
        raise StackError(f"no component or edge {name!r}{did_you_mean(name, names)}")

    def versions(self) -> dict[str, str]:
        out = {}
        for c in self.components():
            d = self._doc("Deployment", c)
            images = [x["image"] for x in d["spec"]["template"]["spec"]["containers"]] if d else []
            out[c] = images[0] if images else "unknown"
        return out

    def describe(self) -> StackInfo:
        comps = []
        for c in self.components():
            url = self.endpoints()[c] if self._up else ""
            health, restarts = "stopped", 0
            if self._up:
                try:
                    d = self.cluster.deployment(self.namespace, c)
                    pods = self.cluster.list_pods(self.namespace, component=c)
                    health = "ready" if d is not None and d.is_ready else "unready"
                    restarts = sum(p.restarts for p in pods)
                except ClusterError as exc:
                    health = f"unknown ({exc.status or 'unreachable'})"
            comps.append(
                self._component_info(
                    c,
                    url=url,
                    admin_url=self._shown_admin_url(c, url),
                    ports={"port": self._service_port(c)},
                    pid=None,
                    health=health,
                    restarts=restarts,
                    log=f"kubectl logs -n {self.namespace} deploy/{c}",
                )
            )
        edges = [
            self._edge_info(
                e,
                listen=f"{self._dns(e.dst)}:{self._edge_port(e.name)}",
                upstream=f"127.0.0.1:{self._service_port(e.dst)}",
                proxy_name=e.proxy_name,
                proxy_api=self._proxy_api(e.dst) if self._up else "",
            )
            for e in self._edges.values()
        ]
        return self._stack_info(comps, edges)

    # -- dry run --------------------------------------------------------------------------

    def plan(self) -> list[Touch]:
        """Exactly the objects ``up`` and ``down`` change (none in attach mode)."""
        if self.config.mode != DeployMode.DEPLOY:
            return [
                Touch("read", "Deployment", self.namespace, c, "attach: checked, never changed")
                for c in self.components()
            ]
        out = [
            Touch("apply", d["kind"], self.namespace, d["metadata"]["name"], "up")
            for d in self._docs
        ]
        out += [
            Touch("delete", d["kind"], self.namespace, d["metadata"]["name"], "down")
            for d in self._teardown_docs()
        ]
        return out

    def selector(self, component: str) -> str:
        return self.guard.selector(component)

    def dry_run(self, scenario: ScenarioModel) -> list[str]:
        """``faultday run --dry-run --driver kubernetes``: every object the run would touch."""
        # Import cycle: the planner reads KubernetesStack (and its Touch) from this module.
        from faultday.cluster.plan import plan  # noqa: PLC0415

        head = (
            f"# namespace {self.namespace}, mode {self.config.mode}, "
            f"label {PART_OF_LABEL}={self.part_of}"
        )
        return [head, *(str(t) for t in plan(self, scenario=scenario))]


def _owned(doc: dict[str, Any], run: str) -> dict[str, Any]:
    """``doc`` with this deploy's ``stack-run`` label (object metadata only: selectors and pod
    templates stay as rendered, so a later deploy's apply is no immutable-field change)."""
    out = copy.deepcopy(doc)
    out["metadata"].setdefault("labels", {})[STACK_RUN_LABEL] = run
    return out


def _read_forward_port(proc: subprocess.Popen[bytes], *, timeout: float) -> int | None:
    """Read kubectl's 'Forwarding from 127.0.0.1:N' line within ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if not ready:
            continue
        # Straight from the pipe: select() said it has data, and nothing else reads it.
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        buf += chunk
        if m := _FORWARDING.search(buf.decode(errors="replace")):
            return int(m.group(1))
    with contextlib.suppress(Exception):
        log.error("kubectl port-forward said: %s", buf.decode(errors="replace")[-500:])
    return None


__all__ = ["NAME_LABEL", "KubernetesStack", "Touch", "place"]
