"""Locust master + N workers as Kubernetes Jobs: schema-valid, each worker with its share
of the request cap and its own seed, applied and deleted in order. No cluster can run
here; API stand-in for the apply/delete calls."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from kube_standin import KubeStandIn

from conftest import NS, PART_OF
from faultday.cluster.client import KubernetesCluster
from faultday.cluster.config import ClusterAccess
from faultday.cluster.guards import BlastRadius, BlastRadiusError
from faultday.cluster.load_jobs import apply_load_jobs, delete_load_jobs, render_load_jobs
from faultday.core.loadconfig import LoadConfig, Shape, ShapeSpec, Workload

BASE = LoadConfig(
    workload=Workload.CHAT,
    shape=ShapeSpec(kind=Shape.CONSTANT, users=32, spawn_rate=8),
    sink="10.0.0.5:7000",
    base_urls={"agent": f"http://agent.{NS}.svc.cluster.local:8080"},
    t0_wall=1_700_000_000.0,
    duration=120.0,
    max_requests=1000,
)


def test_jobs_validate_and_split_the_load() -> None:
    docs = render_load_jobs(BASE, workers=3, namespace=NS, part_of=PART_OF)
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job", "Job"]
    for d in docs:
        kubernetes_validate.validate(d, "1.30.0", strict=True)
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == PART_OF
    data = docs[0]["data"]
    workers = [LoadConfig.model_validate(json.loads(data[f"worker-{i}.json"])) for i in range(3)]
    assert sum(w.max_requests or 0 for w in workers) == 1000
    assert [w.seed for w in workers] == [1, 2, 3]
    assert {w.sink for w in workers} == {"10.0.0.5:7000"}
    wjob = docs[3]["spec"]
    assert (wjob["completionMode"], wjob["completions"], wjob["parallelism"]) == ("Indexed", 3, 3)
    script = wjob["template"]["spec"]["containers"][0]["command"][2]
    assert "worker-$JOB_COMPLETION_INDEX.json" in script
    assert "--master-host faultday-load-master --master-port 5557" in script
    mscript = docs[2]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--expect-workers 3" in mscript
    assert docs[1]["spec"]["selector"] == docs[2]["spec"]["template"]["metadata"]["labels"]
    with pytest.raises(ValueError, match="at least one worker"):
        render_load_jobs(BASE, workers=0, namespace=NS, part_of=PART_OF)


def test_apply_and_delete_in_order(standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in."""
    cluster = KubernetesCluster(
        ClusterAccess(host=standin.url), BlastRadius(frozenset({NS}), PART_OF)
    )
    try:
        docs = render_load_jobs(BASE, workers=2, namespace=NS, part_of=PART_OF)
        apply_load_jobs(cluster, docs)
        assert standin.calls() == [
            f"PATCH /api/v1/namespaces/{NS}/configmaps/faultday-load-config",
            f"PATCH /api/v1/namespaces/{NS}/services/faultday-load-master",
            f"PATCH /apis/batch/v1/namespaces/{NS}/jobs/faultday-load-master",
            f"PATCH /apis/batch/v1/namespaces/{NS}/jobs/faultday-load-workers",
        ]
        assert delete_load_jobs(cluster, docs) == [
            "Job/faultday-load-workers",
            "Job/faultday-load-master",
            "Service/faultday-load-master",
            "ConfigMap/faultday-load-config",
        ]
        other = render_load_jobs(BASE, workers=1, namespace="prod", part_of=PART_OF)
        with pytest.raises(BlastRadiusError):
            apply_load_jobs(cluster, other)
    finally:
        cluster.close()
