"""The ``k8s_load`` cleanup that ``faultday recover`` runs after a crash of the harness.

No cluster can run here, so the Kubernetes API is a stand-in (kube_standin.py); the
calls it receives and their order are asserted.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kube_standin import KubeStandIn

from conftest import NS, PART_OF, k8s_config
from faultday.cluster.cleanup import LOAD_CLEANUP, LoadObjectsCleanup, load_cleanup_record
from faultday.cluster.guards import BlastRadius
from faultday.cluster.load_jobs import RUN_LABEL, render_load_jobs
from faultday.core.ledger import Ledger
from faultday.core.loadconfig import LoadConfig, Shape, ShapeSpec, Workload
from faultday.core.targets import Revert
from faultday.engine.recover import recover_run
from faultday.errors import RevertError


def _docs(run: str) -> list[dict[str, Any]]:
    base = LoadConfig(
        workload=Workload.HTTP,
        shape=ShapeSpec(kind=Shape.CONSTANT, users=1, spawn_rate=1),
        sink="127.0.0.1:1",
        base_urls={"agent": "http://agent:8080"},
        t0_wall=0.0,
        duration=1.0,
    )
    return render_load_jobs(
        base, workers=1, namespace=NS, part_of=PART_OF, name=f"faultday-load-{run}", run=run
    )


def _record(
    standin: KubeStandIn, docs: list[dict[str, Any]], run: str, *, allow: str = NS
) -> Revert:
    return load_cleanup_record(
        access=k8s_config(standin).access,
        guard=BlastRadius(frozenset({allow}), PART_OF),
        namespace=NS,
        run=run,
        docs=docs,
    )


def _apply(standin: KubeStandIn, docs: list[dict[str, Any]]) -> None:
    from faultday.cluster.client import KubernetesCluster

    cluster = KubernetesCluster(k8s_config(standin).access, BlastRadius(frozenset({NS}), PART_OF))
    try:
        for d in docs:
            cluster.apply(d)
    finally:
        cluster.close()


def test_deletes_by_name_newest_first_and_tolerates_objects_already_gone(
    standin: KubeStandIn,
) -> None:
    standin.state.run_jobs = False
    docs = _docs("r1")
    _apply(standin, docs[:2])  # the harness died after the ConfigMap and the Service
    record = _record(standin, docs, "r1")
    assert record.injector == LOAD_CLEANUP
    n = len(standin.calls())
    lines = LoadObjectsCleanup().cleanup(record)
    assert lines == [
        f"Job {NS}/faultday-load-r1-workers already gone",
        f"Job {NS}/faultday-load-r1-master already gone",
        f"deleted Service {NS}/faultday-load-r1-master",
        f"deleted ConfigMap {NS}/faultday-load-r1-config",
    ]
    # Gone objects are only read; present ones read (guard) and then deleted.
    assert [c.split()[0] + " " + c.rsplit("/", 2)[1] for c in standin.calls()[n:]] == [
        "GET jobs",
        "GET jobs",
        "GET services",
        "DELETE services",
        "GET configmaps",
        "DELETE configmaps",
    ]
    assert standin.objects("services", NS) == {} and standin.objects("configmaps", NS) == {}
    # Idempotent: a second pass finds everything gone and deletes nothing.
    assert all(x.endswith("already gone") for x in LoadObjectsCleanup().cleanup(record))


def test_refuses_objects_of_another_run_or_outside_the_stack_and_says_so(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    standin.state.run_jobs = False
    ours = _docs("r1")
    # The same names, now someone else's: another run's label, and no stack label at all.
    theirs = _docs("r1")
    theirs[0]["metadata"]["labels"][RUN_LABEL] = "r2"
    _apply(standin, [theirs[0], ours[2]])
    foreign = copy.deepcopy(ours[1])
    foreign["metadata"]["labels"] = {"team": "x"}
    with standin.lock:  # created by someone else, bypassing our guarded client
        standin.state.objects[(NS, "services", "faultday-load-r1-master")] = foreign
    record = _record(standin, ours, "r1")
    with pytest.raises(RevertError) as err:
        LoadObjectsCleanup().cleanup(record)
    msg = str(err.value)
    assert f"ConfigMap {NS}/faultday-load-r1-config: not labelled {RUN_LABEL}=r1" in msg
    assert f"Service {NS}/faultday-load-r1-master is not labelled" in msg
    assert f"-l {RUN_LABEL}=r1" in msg  # how to look for what is left
    # Ours went (the master Job); theirs were never deleted.
    deletes = [c for c in standin.calls(mutating=True) if c.startswith("DELETE")]
    assert deletes == [f"DELETE /apis/batch/v1/namespaces/{NS}/jobs/faultday-load-r1-master"]
    assert set(standin.objects("configmaps", NS)) == {"faultday-load-r1-config"}
    assert set(standin.objects("services", NS)) == {"faultday-load-r1-master"}

    # Through recover: counted as failed, reported, and left outstanding for a retry.
    ledger = Ledger.in_dir(tmp_path)
    ledger.add_cleanup(record)
    result = recover_run(tmp_path, stop_processes=False)
    assert (result.cleaned, result.failed) == (0, 1)
    assert result.messages[0].startswith(f"FAILED to clean up k8s_load {NS}/faultday-load-r1")
    assert ledger.outstanding_cleanups() == [record]


def test_a_namespace_outside_the_recorded_allowlist_is_never_touched(
    standin: KubeStandIn,
) -> None:
    record = _record(standin, _docs("r1"), "r1", allow="elsewhere")
    with pytest.raises(RevertError, match="not in the allowlist"):
        LoadObjectsCleanup().cleanup(record)
    assert [c for c in standin.calls() if not c.startswith("GET")] == []
