"""Distributed load on Kubernetes: a Locust master Job and N worker pods (one Indexed Job).

Every pod runs faultday's own locustfile with its ``LoadConfig`` (the same JSON
the local runner passes in ``FAULTDAY_LOAD``), read from a ConfigMap: each
worker gets its share of the request cap and its own seed, exactly as the
local ``workers: N`` mode does (``faultday.load.runner.split_cap``). The
workers stream every request to ``sink`` — the harness' event socket, which
must be reachable from the pods — so the results land in the same time series.
"""

from __future__ import annotations

import math
from typing import Any

from faultday.cluster.client import KubernetesCluster
from faultday.cluster.config import MANAGED_BY_LABEL, NAME_LABEL, PART_OF_LABEL
from faultday.load.config import LoadConfig
from faultday.load.runner import WORKERS_TIMEOUT, split_cap

FAULTDAY_IMAGE = "ghcr.io/faultday/faultday:latest"
MASTER_PORT = 5557
ROLE_LABEL = "faultday.dev/load-role"
# The locustfile ships inside the faultday package; find it where the image installed it.
_LOCUSTFILE = (
    "\"$(python -c 'import faultday.load, os; print(os.path.dirname(faultday.load.__file__))')"
    '/locustfile.py"'
)
_COMMON = (
    f"exec python -m locust -f {_LOCUSTFILE} --headless --only-summary --loglevel WARNING "
    "--exit-code-on-error 0"
)


def _labels(name: str, part_of: str, role: str | None = None) -> dict[str, str]:
    out = {NAME_LABEL: name, PART_OF_LABEL: part_of, MANAGED_BY_LABEL: "faultday"}
    if role:
        out[ROLE_LABEL] = role
    return out


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
) -> list[dict[str, Any]]:
    """ConfigMap (one LoadConfig per process), master Service, master Job, workers Job."""
    if workers < 1:
        raise ValueError("distributed load needs at least one worker")
    caps = split_cap(base.max_requests, workers)
    data = {"master.json": base.model_dump_json()}
    for i in range(workers):
        cfg = base.model_copy(update={"max_requests": caps[i], "seed": i + 1})
        data[f"worker-{i}.json"] = cfg.model_dump_json()
    config = f"{name}-config"
    master = f"{name}-master"
    # The Jobs end on their own; the deadline bounds a load that never does.
    deadline = math.ceil(base.duration + WORKERS_TIMEOUT + 120)
    master_labels = _labels(name, part_of, "master")
    worker_labels = _labels(name, part_of, "worker")
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
            "metadata": {"name": config, "labels": _labels(name, part_of), **meta},
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
                "template": _pod(master, image, master_script, master_labels, config),
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-workers", "labels": worker_labels, **meta},
            "spec": {
                "completionMode": "Indexed",
                "completions": workers,
                "parallelism": workers,
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "template": _pod(f"{name}-workers", image, worker_script, worker_labels, config),
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
