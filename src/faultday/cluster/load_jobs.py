"""Distributed load on Kubernetes: a Locust master Job and N worker pods (one Indexed Job).

Every pod runs faultday's own locustfile with its ``LoadConfig`` (the same JSON
the local runner passes in ``FAULTDAY_LOAD``), read from a ConfigMap: each
worker gets its share of the request cap and its own seed, exactly as the
local ``workers: N`` mode does (``faultday.load.runner.split_cap``). The
workers stream every request to ``sink`` — the harness' event socket, which
must be reachable from the pods — so the results land in the same time series.

``KubernetesLoad`` is the run participant: the kubernetes driver hands it to the
scenario's load (``KubernetesStack.load_participant``). It applies the objects
at warm-up, waits (bounded) for the Jobs to end after the run, reads their
status, and deletes every object it applied, on every path out of the run.
Before the first apply it writes a cleanup record to the run's ledger, marked
done once everything is deleted: if the harness itself is killed, ``faultday
recover`` deletes the objects from that record (``faultday.cluster.cleanup``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from faultday.cluster.cleanup import load_cleanup_record
from faultday.cluster.client import ClusterError, JobState, KubernetesCluster
from faultday.cluster.config import (
    LOAD_RUN_LABEL,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PART_OF_LABEL,
    LoadJobsConfig,
)
from faultday.core.ledger import Ledger
from faultday.core.loadconfig import LoadConfig, Workload
from faultday.core.targets import Revert
from faultday.core.timebase import TimeBase
from faultday.core.vocab import EventKind
from faultday.errors import FaultdayError
from faultday.load.answers import write_answers
from faultday.load.runner import (
    WORKERS_TIMEOUT,
    LoadError,
    LoadOptions,
    base_config,
    check_target,
    split_cap,
)
from faultday.load.sink import EventSink, SinkStats

if TYPE_CHECKING:
    from faultday.cluster.kubernetes import KubernetesStack
    from faultday.core.protocols import RunView
    from faultday.core.scenario import LoadSpec

log = logging.getLogger(__name__)

FAULTDAY_IMAGE = "ghcr.io/faultday/faultday:latest"
MASTER_PORT = 5557
ROLE_LABEL = "faultday.dev/load-role"
RUN_LABEL = LOAD_RUN_LABEL
# Finished Jobs (and their pods) go away by themselves even if the harness dies.
JOB_TTL = 600
POLL = 0.5  # real seconds between looks at the Jobs' status
# The locustfile ships inside the faultday package; find it where the image installed it.
_LOCUSTFILE = (
    "\"$(python -c 'import faultday.load, os; print(os.path.dirname(faultday.load.__file__))')"
    '/locustfile.py"'
)
_COMMON = (
    f"exec python -m locust -f {_LOCUSTFILE} --headless --only-summary --loglevel WARNING "
    "--exit-code-on-error 0"
)


def _labels(name: str, part_of: str, role: str | None = None, run: str = "") -> dict[str, str]:
    out = {NAME_LABEL: name, PART_OF_LABEL: part_of, MANAGED_BY_LABEL: "faultday"}
    if role:
        out[ROLE_LABEL] = role
    if run:
        out[RUN_LABEL] = run
    return out


def load_objects(name: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of what ``render_load_jobs`` makes, in apply order."""
    return [
        ("v1", "ConfigMap", f"{name}-config"),
        ("v1", "Service", f"{name}-master"),
        ("batch/v1", "Job", f"{name}-master"),
        ("batch/v1", "Job", f"{name}-workers"),
    ]


def run_id(run_name: str) -> str:
    """A short DNS-safe id for one run's load objects (names and the run label)."""
    return hashlib.sha1(run_name.encode(), usedforsecurity=False).hexdigest()[:8]


def _pod(name: str, image: str, script: str, labels: dict[str, str], config: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "locust",
                    "image": image,
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": config}}],
        },
    }


def render_load_jobs(
    base: LoadConfig,
    *,
    workers: int,
    namespace: str,
    part_of: str,
    image: str = FAULTDAY_IMAGE,
    name: str = "faultday-load",
    run: str = "",
) -> list[dict[str, Any]]:
    """ConfigMap (one LoadConfig per process), master Service, master Job, workers Job."""
    if workers < 1:
        raise ValueError("distributed load needs at least one worker")
    caps = split_cap(base.max_requests, workers)
    data = {"master.json": base.model_dump_json()}
    for i in range(workers):
        cfg = base.model_copy(update={"max_requests": caps[i], "seed": i + 1})
        data[f"worker-{i}.json"] = cfg.model_dump_json()
    (_, _, config), (_, _, master), _, (_, _, workers_job) = load_objects(name)
    # The Jobs end on their own; the deadline bounds a load that never does.
    deadline = math.ceil(base.duration + WORKERS_TIMEOUT + 120)
    master_labels = _labels(name, part_of, "master", run)
    worker_labels = _labels(name, part_of, "worker", run)
    master_script = (
        f'FAULTDAY_LOAD="$(cat /config/master.json)" {_COMMON} --master '
        f"--master-bind-host 0.0.0.0 --master-bind-port {MASTER_PORT} "
        f"--expect-workers {workers} --expect-workers-max-wait {int(WORKERS_TIMEOUT)}"
    )
    worker_script = (
        'FAULTDAY_LOAD="$(cat /config/worker-$JOB_COMPLETION_INDEX.json)" '
        f"{_COMMON} --worker --master-host {master} --master-port {MASTER_PORT}"
    )
    meta = {"namespace": namespace}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config, "labels": _labels(name, part_of, run=run), **meta},
            "data": data,
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": master, "labels": master_labels, **meta},
            "spec": {
                "selector": master_labels,
                "ports": [{"name": "locust", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": master, "labels": master_labels, **meta},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": JOB_TTL,
                "template": _pod(master, image, master_script, master_labels, config),
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": workers_job, "labels": worker_labels, **meta},
            "spec": {
                "completionMode": "Indexed",
                "completions": workers,
                "parallelism": workers,
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": JOB_TTL,
                "template": _pod(workers_job, image, worker_script, worker_labels, config),
            },
        },
    ]


def apply_load_jobs(cluster: KubernetesCluster, docs: list[dict[str, Any]]) -> None:
    """Apply in order (config, Service, master, workers); the guard checks each."""
    for d in docs:
        cluster.apply(d)


def delete_load_jobs(cluster: KubernetesCluster, docs: list[dict[str, Any]]) -> list[str]:
    """Delete workers first, then master, Service, ConfigMap; returns what was still there."""
    gone = []
    for d in reversed(docs):
        meta = d["metadata"]
        if cluster.delete(
            api_version=d["apiVersion"],
            kind=d["kind"],
            namespace=meta["namespace"],
            name=meta["name"],
        ):
            gone.append(f"{d['kind']}/{meta['name']}")
    return gone


def advertised_sink(settings: LoadJobsConfig, port: int) -> str:
    """host:port the load pods dial: ``sink_advertise`` (with or without a port), else the bind."""
    adv = settings.sink_advertise or settings.sink_bind
    if adv.count(":") > 1 and not adv.startswith("["):
        return f"[{adv}]:{port}"  # a bare IPv6 address
    _, sep, given = adv.rpartition(":")
    if sep and given.isdigit():
        return adv
    return f"{adv}:{port}"


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class KubernetesLoad:
    """The scenario's load as a Locust master Job and N worker pods (a run participant)."""

    name = "load"

    def __init__(self, stack: KubernetesStack, spec: LoadSpec, options: LoadOptions) -> None:
        self.stack = stack
        self.spec = spec
        self.options = options
        self.settings: LoadJobsConfig = stack.config.load
        self.workload = Workload(spec.workload)
        self.workers = max(1, spec.workers)  # workers: 0 means one worker pod here
        self.sink: EventSink | None = None
        self.docs: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []
        self.jobs: dict[str, JobState | None] = {}
        self._base: LoadConfig | None = None
        self._run: RunView | None = None
        self._stopped = False
        self._cancelled = False
        self._ledger: Ledger | None = None
        self._cleanup: Revert | None = None  # outstanding in the run's ledger until deleted

    @property
    def cluster(self) -> KubernetesCluster:
        return self.stack.cluster

    @property
    def stats(self) -> SinkStats:
        return self.sink.stats if self.sink is not None else SinkStats()

    # ---- Participant -----------------------------------------------------------------
    def start(self, run: RunView) -> None:
        """Open the event socket, then apply ConfigMap, Service, master and workers Jobs."""
        self._run = run
        endpoints = self.stack.load_endpoints()
        check_target(self.workload, self.options, endpoints)
        timebase = TimeBase(run.clock, warmup=run.scenario.spec.warmup)
        try:
            self.sink = EventSink(
                run.observations.add_requests,
                timebase.exact,
                host=self.settings.sink_bind,
                port=self.settings.sink_port,
            )
        except OSError as exc:
            raise LoadError(
                f"cannot open the load event socket on {self.settings.sink_bind}:"
                f"{self.settings.sink_port}: {exc}"
            ) from exc
        self.sink.start()
        sink = advertised_sink(self.settings, self.sink.port)
        self._base = base_config(
            run,
            self.spec,
            self.options,
            sink=sink,
            base_urls=endpoints,
            t0_wall=timebase.expected_t0,
        )
        rid = run_id(run.run_dir.name)
        self.docs = render_load_jobs(
            self._base,
            workers=self.workers,
            namespace=self.stack.namespace,
            part_of=self.stack.part_of,
            image=self.settings.image,
            name=f"faultday-load-{rid}",
            run=rid,
        )
        if is_loopback(sink):
            log.warning("load pods are told to send to %s, a loopback address", sink)
            run.event(
                EventKind.LOAD_SINK_LOOPBACK,
                f"load pods send to {sink}: reachable only where pods share the harness' "
                "network (set load.sink_bind/sink_advertise in the driver config)",
                sink=sink,
            )
        # On disk before the first apply (record, then act): recover deletes them after a crash.
        self._ledger = Ledger.in_dir(run.run_dir)
        self._cleanup = load_cleanup_record(
            access=self.stack.config.access,
            guard=self.stack.guard,
            namespace=self.stack.namespace,
            run=rid,
            docs=self.docs,
        )
        self._ledger.add_cleanup(self._cleanup)
        # Known to the stack before the first apply: its down() deletes leftovers too.
        self.stack.track_load(self.docs, on_deleted=self._cleaned)
        try:
            for doc in self.docs:
                # Counted before the call: an apply that errors may still have taken effect.
                self.applied.append(doc)
                self.cluster.apply(doc)
        except FaultdayError as exc:
            errors = self._delete()
            self.sink.stop()
            extra = f"; cleanup: {'; '.join(errors)}" if errors else ""
            raise LoadError(f"could not start the load Jobs: {exc}{extra}") from exc
        run.event(
            EventKind.LOAD_STARTED,
            f"{self.workload}, {self.spec.users} users, {self.spec.shape}, "
            f"Kubernetes Jobs: master + {self.workers} workers in {self.stack.namespace}",
            workers=self.workers,
            namespace=self.stack.namespace,
            objects=[f"{d['kind']}/{d['metadata']['name']}" for d in self.docs],
            sink=sink,
        )

    def stop(self) -> None:
        """Wait (bounded) for the Jobs to end, read their status, delete everything; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        errors: list[str] = []
        try:
            if self.applied:
                self._await_jobs(errors)
        finally:
            errors += self._delete()
            if self.sink is not None:
                self.sink.stop()
            if self._run is not None:
                write_answers(self._run)  # the pods' quoted answers, as a local load writes them
            self._report(errors)

    # ---- the end of the load -------------------------------------------------------------
    def _job_names(self) -> list[str]:
        return [d["metadata"]["name"] for d in self.applied if d["kind"] == "Job"]

    def _await_jobs(self, errors: list[str]) -> None:
        assert self._base is not None
        ns = self.stack.namespace
        now = time.time()
        # A run that ended early (abort, error) does not wait for a load it no longer needs.
        cancelled = self._cancelled = now < self._base.t0_wall + self._base.duration - 1.0
        wait = (
            0.0 if cancelled else max(0.0, self._base.end_wall - now) + self.settings.finish_timeout
        )
        deadline = time.monotonic() + wait
        while True:
            try:
                self.jobs = {j: self.cluster.job(ns, j) for j in self._job_names()}
            except ClusterError as exc:
                errors.append(f"could not read the load Jobs: {exc}")
                return
            done = all(s is not None and s.finished for s in self.jobs.values())
            if done or time.monotonic() >= deadline:
                break
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
        if cancelled:
            self._event(
                EventKind.LOAD_JOBS_CANCELLED, "the run ended early; the load Jobs are deleted"
            )
            return
        for name, state in self.jobs.items():
            if state is None:
                errors.append(f"load Job {ns}/{name} disappeared before it finished")
            elif state.condition == "Failed":
                errors.append(
                    f"load Job {ns}/{name} failed: {state.describe()} "
                    f"(kubectl logs -n {ns} job/{name})"
                )
            elif not state.finished:
                self._event(
                    EventKind.LOAD_JOBS_UNFINISHED,
                    f"{name} still {state.describe()} after {wait:.0f}s; deleted",
                )

    def _delete(self) -> list[str]:
        """Delete what was applied, workers first; every object is tried; errors returned."""
        errors = []
        for doc in list(reversed(self.applied)):
            meta = doc["metadata"]
            try:
                self.cluster.delete(
                    api_version=doc["apiVersion"],
                    kind=doc["kind"],
                    namespace=meta["namespace"],
                    name=meta["name"],
                )
            except FaultdayError as exc:
                errors.append(f"could not delete {doc['kind']} {meta['name']}: {exc}")
                continue
            self.applied.remove(doc)
        if not self.applied:
            self.stack.forget_load(self.docs, on_deleted=self._cleaned)
            self._cleaned()
        elif errors:
            rid = self.docs[0]["metadata"]["labels"].get(RUN_LABEL, "")
            errors.append(
                f"left behind; remove with: kubectl delete job,service,configmap "
                f"-n {self.stack.namespace} -l {RUN_LABEL}={rid}"
            )
        return errors

    def _cleaned(self) -> None:
        """Everything is deleted (by the load or the stack's down): the record is done."""
        if self._cleanup is not None and self._ledger is not None:
            self._ledger.cleanup_done(self._cleanup, ok=True)
            self._cleanup = None

    def _event(self, kind: EventKind, message: str, **data: object) -> None:
        if self._run is not None:
            self._run.event(kind, message, **data)

    def _report(self, errors: list[str]) -> None:
        run = self._run
        if run is None:
            return
        s = self.stats
        sink = self._base.sink if self._base is not None else ""
        if self.jobs and not self._cancelled and s.connections == 0:
            errors.append(
                f"no load pod connected to the event socket at {sink}: is it reachable from "
                "the pods? (driver config load.sink_bind / load.sink_advertise)"
            )
        for e in errors:
            run.error(f"load on Kubernetes: {e}")
        run.event(
            EventKind.LOAD_STOPPED,
            f"{s.events} requests recorded from {s.connections} load pods",
            requests=s.events,
            bad_lines=s.bad_lines,
            connections=s.connections,
            max_lag=round(s.max_lag, 4),
            mean_lag=round(s.mean_lag, 4),
            jobs={n: (j.describe() if j else "gone") for n, j in self.jobs.items()},
        )
