"""After a crash of the harness: delete what a run created in a cluster (``faultday recover``).

Three plugins of the ``faultday.cleanups`` group, each replaying one kind of
cleanup record (``Ledger.add_cleanup``), written before the first object is
created and marked done once the normal path removed everything:

* ``k8s_load``: ``KubernetesLoad``'s ConfigMap, Service and Jobs;
* ``k8s_stack``: the Deployments, Services, ConfigMaps … the kubernetes driver
  applied in deploy mode (attach mode applies nothing and records nothing);
* ``docker_stack``: the docker driver's containers and private network.

A record carries the access (cluster or engine), the blast radius and the
objects' names in delete order, so a plugin rebuilds its client with no live
stack. Each object is read first and deleted only if it is still in the
allowlisted namespace, labelled as the stack's *and* carries the run's own
label (``faultday.dev/load-run`` / ``faultday.dev/stack-run``): a name reused by
someone else, or re-created by a later deploy, is refused. Gone is fine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import JsonValue

from faultday.cluster.client import ClusterError, KubernetesCluster
from faultday.cluster.config import (
    LOAD_RUN_LABEL,
    PART_OF_LABEL,
    STACK_RUN_LABEL,
    ClusterAccess,
    DockerAccess,
)
from faultday.cluster.guards import BlastRadius, BlastRadiusError
from faultday.core.ledger import Cleanup
from faultday.core.targets import Revert
from faultday.errors import RevertError

# Their names in the faultday.cleanups entry-point group (a record's ``injector`` field).
LOAD_CLEANUP = "k8s_load"
STACK_CLEANUP = "k8s_stack"
DOCKER_CLEANUP = "docker_stack"


def _object_list(docs: Sequence[dict[str, Any]]) -> list[JsonValue]:
    return [[str(d["apiVersion"]), str(d["kind"]), str(d["metadata"]["name"])] for d in docs]


def _data(
    access: ClusterAccess, guard: BlastRadius, namespace: str, run: str, objects: list[JsonValue]
) -> dict[str, JsonValue]:
    """What a Kubernetes cleanup needs to rebuild its access and find its objects."""
    return {
        "access": access.model_dump(mode="json"),
        "guard": guard.to_json(),
        "namespace": namespace,
        "run": run,
        "objects": objects,
    }


def load_cleanup_record(
    *,
    access: ClusterAccess,
    guard: BlastRadius,
    namespace: str,
    run: str,
    docs: Sequence[dict[str, Any]],
) -> Revert:
    """The record to write before ``docs`` are applied; objects listed in delete order."""
    objects = _object_list(list(reversed(docs)))
    prefix = str(docs[0]["metadata"]["name"]).rsplit("-", 1)[0] if docs else "faultday-load"
    return Revert(
        injector=LOAD_CLEANUP,
        fault="load",
        target=f"{namespace}/{prefix}",
        action="delete_load_objects",
        data=_data(access, guard, namespace, run, objects),
    )


def stack_cleanup_record(
    *,
    access: ClusterAccess,
    guard: BlastRadius,
    namespace: str,
    run: str,
    docs: Sequence[dict[str, Any]],
) -> Revert:
    """The record the kubernetes driver writes before its first apply; ``docs`` in delete order."""
    return Revert(
        injector=STACK_CLEANUP,
        fault="stack",
        target=f"{namespace}/{guard.part_of}",
        action="delete_stack_objects",
        data=_data(access, guard, namespace, run, _object_list(docs)),
    )


def delete_load_objects(cluster: KubernetesCluster, record: Revert) -> list[str]:
    """Delete the load objects ``record`` lists, newest first (see ``delete_recorded``)."""
    return delete_recorded(cluster, record, run_label=LOAD_RUN_LABEL, kinds="job,service,configmap")


def delete_stack_objects(cluster: KubernetesCluster, record: Revert) -> list[str]:
    """Delete the stack objects ``record`` lists, workloads first (see ``delete_recorded``)."""
    return delete_recorded(
        cluster, record, run_label=STACK_RUN_LABEL, kinds="deployment,service,configmap"
    )


def delete_recorded(
    cluster: KubernetesCluster, record: Revert, *, run_label: str, kinds: str
) -> list[str]:
    """Delete what ``record`` lists, in its order; every object is tried; 404 is fine.

    Returns one line per object; raises RevertError naming every object that
    could not be deleted (or was refused) after trying all of them.
    """
    ns, run = str(record.data["namespace"]), str(record.data["run"])
    try:
        cluster.guard.check_namespace(ns)  # before any call, even a read
    except BlastRadiusError as exc:
        raise RevertError(f"objects in {ns}: {exc}") from exc
    raw = record.data.get("objects")
    lines: list[str] = []
    errors: list[str] = []
    for entry in raw if isinstance(raw, list) else []:
        if not (isinstance(entry, list) and len(entry) == 3):
            errors.append(f"bad object entry in the cleanup record: {entry!r}")
            continue
        api_version, kind, name = (str(x) for x in entry)
        try:
            line = _delete_one(
                cluster,
                api_version=api_version,
                kind=kind,
                ns=ns,
                name=name,
                owner=(run_label, run),
            )
        except (ClusterError, BlastRadiusError) as exc:
            errors.append(f"{kind} {ns}/{name}: {exc}")
            continue
        lines.append(line)
    if errors:
        raise _left_behind(errors, lines, f"kubectl get {kinds} -n {ns} -l {run_label}={run}")
    return lines


def _left_behind(errors: list[str], done: list[str], check: str) -> RevertError:
    """A cleanup that removed only part: what failed, how to look, and what was removed."""
    removed = f"; done: {', '.join(done)}" if done else ""
    return RevertError(f"{'; '.join(errors)} (left behind; check with: {check}){removed}")


def _delete_one(
    cluster: KubernetesCluster,
    *,
    api_version: str,
    kind: str,
    ns: str,
    name: str,
    owner: tuple[str, str],
) -> str:
    what = f"{kind} {ns}/{name}"
    labels = cluster.read_labels(api_version=api_version, kind=kind, namespace=ns, name=name)
    if labels is None:
        return f"{what} already gone"
    cluster.guard.check_object(kind=kind, namespace=ns, name=name, labels=labels)
    label, run = owner
    if labels.get(label) != run:
        raise BlastRadiusError(
            f"not labelled {label}={run} (it has {labels.get(label)!r}); refusing to delete it"
        )
    gone = cluster.delete(api_version=api_version, kind=kind, namespace=ns, name=name)
    return f"deleted {what}" if gone else f"{what} already gone"


def _in_recorded_cluster(
    record: Revert, delete: Callable[[KubernetesCluster, Revert], list[str]]
) -> list[str]:
    """Run ``delete`` against the cluster (and blast radius) the record was written for."""
    access = ClusterAccess.model_validate(record.data["access"])
    cluster = KubernetesCluster(access, BlastRadius.from_json(record.data["guard"]))
    try:
        return delete(cluster, record)
    finally:
        cluster.close()


class LoadObjectsCleanup(Cleanup):
    """Delete a crashed run's load Jobs, master Service and ConfigMap (by name and run label)."""

    name = LOAD_CLEANUP
    summary = "Kubernetes: delete the load objects a crashed run left behind"

    def cleanup(self, record: Revert) -> list[str]:
        return _in_recorded_cluster(record, delete_load_objects)


class StackObjectsCleanup(Cleanup):
    """Delete a crashed run's deployed stack: Deployments, Services, ConfigMaps (name + labels)."""

    name = STACK_CLEANUP
    summary = "Kubernetes: delete the stack objects a crashed run deployed"

    def cleanup(self, record: Revert) -> list[str]:
        return _in_recorded_cluster(record, delete_stack_objects)


# -- Docker ------------------------------------------------------------------------------


def docker_cleanup_record(
    *, access: DockerAccess, part_of: str, run: str, containers: Sequence[str], network: str
) -> Revert:
    """The record the docker driver writes before creating its network; containers in
    removal order, the network last."""
    names: list[JsonValue] = [*containers]
    return Revert(
        injector=DOCKER_CLEANUP,
        fault="stack",
        target=part_of,
        action="remove_containers_and_network",
        data={
            "access": access.model_dump(mode="json"),
            "part_of": part_of,
            "run": run,
            "containers": names,
            "network": network,
        },
    )


def remove_docker_stack(client: Any, record: Revert) -> list[str]:
    """Remove the recorded containers, then the network; only ones labelled as this stack's
    and this run's; gone is fine. One line per object; RevertError after trying all."""
    # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
    import docker  # type: ignore[import-untyped]  # noqa: PLC0415
    import requests  # noqa: PLC0415

    api_errors = (docker.errors.DockerException, requests.RequestException)
    owner = {
        PART_OF_LABEL: str(record.data["part_of"]),
        STACK_RUN_LABEL: str(record.data["run"]),
    }
    raw = record.data.get("containers")
    names = [str(n) for n in raw] if isinstance(raw, list) else []
    lines: list[str] = []
    errors: list[str] = []
    found = [("container", n, client.containers) for n in names]
    found.append(("network", str(record.data["network"]), client.networks))
    for kind, name, collection in found:
        try:
            lines.append(_remove_one(kind, name, collection, owner))
        except (*api_errors, BlastRadiusError) as exc:
            errors.append(f"{kind} {name}: {exc}")
    if errors:
        sel = ",".join(f"{k}={v}" for k, v in owner.items())
        raise _left_behind(errors, lines, f"docker ps -a --filter label={sel}")
    return lines


def _remove_one(kind: str, name: str, collection: Any, owner: dict[str, str]) -> str:
    # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
    import docker  # noqa: PLC0415

    try:
        obj = collection.get(name)
    except docker.errors.NotFound:
        return f"{kind} {name} already gone"
    attrs = obj.attrs
    labels = (attrs.get("Config") or {}).get("Labels") if kind == "container" else attrs["Labels"]
    for key, want in owner.items():
        got = (labels or {}).get(key)
        if got != want:
            raise BlastRadiusError(
                f"not labelled {key}={want} (it has {got!r}); refusing to remove it"
            )
    try:
        if kind == "container":
            obj.remove(force=True)
        else:
            obj.remove()
    except docker.errors.NotFound:
        return f"{kind} {name} already gone"
    return f"removed {kind} {name}"


class DockerStackCleanup(Cleanup):
    """Remove a crashed run's Docker containers and network (by name and labels)."""

    name = DOCKER_CLEANUP
    summary = "Docker: remove the containers and network a crashed run created"

    def cleanup(self, record: Revert) -> list[str]:
        client = DockerAccess.model_validate(record.data["access"]).client()
        try:
            return remove_docker_stack(client, record)
        finally:
            client.close()
