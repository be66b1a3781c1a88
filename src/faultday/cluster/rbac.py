"""The RBAC the harness needs: a ServiceAccount, a Role and RoleBinding in the stack's
namespace, and (only for ``node_gpu_loss``) a ClusterRole to read and patch nodes.

Rendered, never applied by faultday: a cluster admin reviews and applies them
once (``faultday k8s rbac --profile P | kubectl apply -f -``), and the harness
then runs with exactly these rights.
"""

from __future__ import annotations

from typing import Any

from faultday.cluster.config import MANAGED_BY_LABEL, PART_OF_LABEL

RBAC_API = "rbac.authorization.k8s.io/v1"
SERVICE_ACCOUNT = "faultday"

# What the driver and the injectors call; kept in step with cluster/client.py.
NAMESPACE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {
        "apiGroups": [""],
        "resources": ["services", "configmaps"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["chaos-mesh.org"],
        "resources": ["networkchaos", "podchaos", "stresschaos"],
        "verbs": ["get", "list", "create", "delete"],
    },
)
NODE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
)


def _meta(name: str, part_of: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {PART_OF_LABEL: part_of, MANAGED_BY_LABEL: "faultday"},
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def render_rbac(
    *,
    namespace: str,
    part_of: str,
    node_access: bool = True,
    service_account: str = SERVICE_ACCOUNT,
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding (and ClusterRole + binding when ``node_access``)."""
    role = f"faultday-{part_of.removeprefix('faultday-')}"
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(service_account, part_of, namespace),
        },
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": _meta(role, part_of, namespace),
            "rules": [dict(r) for r in NAMESPACE_RULES],
        },
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": _meta(role, part_of, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [subject],
        },
    ]
    if node_access:
        cluster_role = f"{role}-{namespace}-nodes"
        docs += [
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRole",
                "metadata": _meta(cluster_role, part_of),
                "rules": [dict(r) for r in NODE_RULES],
            },
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRoleBinding",
                "metadata": _meta(cluster_role, part_of),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_role,
                },
                "subjects": [subject],
            },
        ]
    return docs
