"""After a crash of the harness: delete a run's load objects (``faultday recover``).

``KubernetesLoad`` writes a cleanup record (``Ledger.add_cleanup``) before it
applies its ConfigMap, Service and Jobs. The record carries the cluster access,
the blast radius and the objects' names, so this plugin (``k8s_load`` in the
``faultday.cleanups`` group) can rebuild a client with no live stack. Each
object is read first and deleted only if it is still in the allowlisted
namespace, labelled as the stack's *and* carries this run's
``faultday.dev/load-run`` label: a name reused by someone else is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import JsonValue

from faultday.cluster.client import ClusterError, KubernetesCluster
from faultday.cluster.config import LOAD_RUN_LABEL, ClusterAccess
from faultday.cluster.guards import BlastRadius, BlastRadiusError
from faultday.engine.ledger import Cleanup
from faultday.errors import RevertError
from faultday.injectors.base import Revert

LOAD_CLEANUP = "k8s_load"  # its name in the faultday.cleanups entry-point group


def load_cleanup_record(
    *,
    access: ClusterAccess,
    guard: BlastRadius,
    namespace: str,
    run: str,
    docs: Sequence[dict[str, Any]],
) -> Revert:
    """The record to write before ``docs`` are applied; objects listed in delete order."""
    objects: list[JsonValue] = [
        [str(d["apiVersion"]), str(d["kind"]), str(d["metadata"]["name"])] for d in reversed(docs)
    ]
    prefix = str(docs[0]["metadata"]["name"]).rsplit("-", 1)[0] if docs else "faultday-load"
    return Revert(
        injector=LOAD_CLEANUP,
        fault="load",
        target=f"{namespace}/{prefix}",
        action="delete_load_objects",
        data={
            "access": access.model_dump(mode="json"),
            "guard": guard.to_json(),
            "namespace": namespace,
            "run": run,
            "objects": objects,
        },
    )


def delete_load_objects(cluster: KubernetesCluster, record: Revert) -> list[str]:
    """Delete what ``record`` lists, newest first; every object is tried; 404 is fine.

    Returns one line per object; raises RevertError naming every object that
    could not be deleted (or was refused) after trying all of them.
    """
    ns, run = str(record.data["namespace"]), str(record.data["run"])
    try:
        cluster.guard.check_namespace(ns)  # before any call, even a read
    except BlastRadiusError as exc:
        raise RevertError(f"load objects in {ns}: {exc}") from exc
    raw = record.data.get("objects")
    lines: list[str] = []
    errors: list[str] = []
    for entry in raw if isinstance(raw, list) else []:
        if not (isinstance(entry, list) and len(entry) == 3):
            errors.append(f"bad object entry in the cleanup record: {entry!r}")
            continue
        api_version, kind, name = (str(x) for x in entry)
        what = f"{kind} {ns}/{name}"
        try:
            line = _delete_one(
                cluster, api_version=api_version, kind=kind, ns=ns, name=name, run=run
            )
        except (ClusterError, BlastRadiusError) as exc:
            errors.append(f"{what}: {exc}")
            continue
        lines.append(line)
    if errors:
        raise RevertError(
            "; ".join(errors)
            + f" (left behind; check with: kubectl get job,service,configmap -n {ns} "
            f"-l {LOAD_RUN_LABEL}={run})"
        )
    return lines


def _delete_one(
    cluster: KubernetesCluster, *, api_version: str, kind: str, ns: str, name: str, run: str
) -> str:
    what = f"{kind} {ns}/{name}"
    labels = cluster.read_labels(api_version=api_version, kind=kind, namespace=ns, name=name)
    if labels is None:
        return f"{what} already gone"
    cluster.guard.check_object(kind=kind, namespace=ns, name=name, labels=labels)
    if labels.get(LOAD_RUN_LABEL) != run:
        raise BlastRadiusError(
            f"not labelled {LOAD_RUN_LABEL}={run} (it has {labels.get(LOAD_RUN_LABEL)!r}); "
            "refusing to delete it"
        )
    gone = cluster.delete(api_version=api_version, kind=kind, namespace=ns, name=name)
    return f"deleted {what}" if gone else f"{what} already gone"


class LoadObjectsCleanup(Cleanup):
    """Delete a crashed run's load Jobs, master Service and ConfigMap (by name and run label)."""

    name = LOAD_CLEANUP
    summary = "Kubernetes: delete the load objects a crashed run left behind"

    def cleanup(self, record: Revert) -> list[str]:
        access = ClusterAccess.model_validate(record.data["access"])
        cluster = KubernetesCluster(access, BlastRadius.from_json(record.data["guard"]))
        try:
            return delete_load_objects(cluster, record)
        finally:
            cluster.close()
