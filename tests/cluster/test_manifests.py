"""Schema validation of everything faultday sends to a cluster.

Rendered stack manifests and RBAC against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict); Chaos Mesh objects against the CRDs'
openAPIV3Schema vendored in schemas/ (see schemas/README.md for the source).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from faultday.cluster.chaosmesh import ChaosKind, ChaosMeshParams, build, go_duration, object_name
from faultday.cluster.guards import BlastRadius, BlastRadiusError
from faultday.cluster.k8s_render import manifests
from faultday.cluster.kubernetes import place
from faultday.cluster.rbac import render_rbac
from faultday.core.profile import StackProfile

K8S_VERSION = "1.30.0"
SCHEMAS = Path(__file__).parent / "schemas"
GUARD = BlastRadius(frozenset({"gameday"}), "faultday-local")


def _closed(node: Any) -> Any:
    """Close every object schema: the API server would silently prune unknown fields,
    which for us means a typo'd selector that matches everything or nothing."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


def chaos_schema(kind: str) -> dict[str, Any]:
    schema = json.loads((SCHEMAS / f"{kind.lower()}.json").read_text())
    schema = _closed(schema)
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is the API server's
    return schema


def k8s_valid(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_rendered_stack_manifests_validate(profile: StackProfile) -> None:
    docs = place(manifests(profile), namespace="gameday", part_of="faultday-local")
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ConfigMap", "Deployment", "Service"]
    for d in docs:
        k8s_valid(d)
        assert d["metadata"]["namespace"] == "gameday"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "faultday-local"


def test_relabelled_manifests_keep_selectors_consistent(profile: StackProfile) -> None:
    docs = place(manifests(profile), namespace="ns2", part_of="team-rag")
    for d in docs:
        k8s_valid(d)
        if d["kind"] == "Deployment":
            sel = d["spec"]["selector"]["matchLabels"]
            assert sel["app.kubernetes.io/part-of"] == "team-rag"
            assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()


def test_rbac_validates_and_covers_what_the_client_calls() -> None:
    docs = render_rbac(namespace="gameday", part_of="faultday-local")
    assert [d["kind"] for d in docs] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    ]
    for d in docs:
        k8s_valid(d)
    role = docs[1]
    verbs = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for needed in [
        ("pods", "delete"),
        ("deployments", "patch"),
        ("podchaos", "create"),
        ("networkchaos", "delete"),
        ("configmaps", "patch"),
    ]:
        assert needed in verbs
    cluster_role = docs[3]
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}
    ]
    assert "namespace" not in cluster_role["metadata"]
    assert len(render_rbac(namespace="gameday", part_of="x", node_access=False)) == 3


def test_rbac_schema_check_can_fail() -> None:
    bad = copy.deepcopy(render_rbac(namespace="gameday", part_of="faultday-local")[2])
    del bad["roleRef"]["kind"]
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s_valid(bad)


CHAOS_CASES: list[dict[str, Any]] = [
    {
        "kind": "NetworkChaos",
        "action": "delay",
        "latency": "250ms",
        "jitter": "50ms",
        "correlation": 25,
    },
    {"kind": "NetworkChaos", "action": "loss", "percent": 30},
    {"kind": "NetworkChaos", "action": "partition", "peer": "qdrant", "direction": "both"},
    {"kind": "NetworkChaos", "action": "bandwidth", "rate": "1mbps", "duration": "30s"},
    {"kind": "PodChaos", "action": "pod-kill", "mode": "fixed", "value": "1", "grace_period": 0},
    {"kind": "PodChaos", "action": "pod-failure", "duration": "45s"},
    {"kind": "PodChaos", "action": "container-kill", "container_names": ["toxiproxy"]},
    {
        "kind": "StressChaos",
        "cpu_workers": 2,
        "cpu_load": 80,
        "memory_workers": 1,
        "memory_size": "256MB",
    },
]


@pytest.mark.parametrize(
    "raw", CHAOS_CASES, ids=lambda r: f"{r['kind']}-{r.get('action', 'stress')}"
)
def test_chaos_objects_validate_against_crd_schema(raw: dict[str, Any]) -> None:
    params = ChaosMeshParams.model_validate(raw)
    obj = build(
        params,
        name=object_name("Fault 1!", "abc123"),
        namespace="gameday",
        component="agent",
        guard=GUARD,
        fault="Fault 1!",
    )
    jsonschema.validate(obj, chaos_schema(obj["kind"]))
    sel = obj["spec"]["selector"]
    assert sel == {
        "namespaces": ["gameday"],
        "labelSelectors": {
            "app.kubernetes.io/part-of": "faultday-local",
            "app.kubernetes.io/name": "agent",
        },
    }
    assert obj["metadata"]["name"] == "faultday-fault-1-abc123"
    if params.peer:
        assert (
            obj["spec"]["target"]["selector"]["labelSelectors"]["app.kubernetes.io/name"]
            == "qdrant"
        )


def test_chaos_schema_check_can_fail() -> None:
    obj = build(
        ChaosMeshParams(kind=ChaosKind.NETWORK, action="delay", latency="200ms"),
        name="x",
        namespace="gameday",
        component="agent",
        guard=GUARD,
    )
    obj["spec"]["selector"]["labelSelector"] = obj["spec"]["selector"].pop("labelSelectors")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, chaos_schema("NetworkChaos"))
    obj2 = build(
        ChaosMeshParams(kind=ChaosKind.NETWORK, action="delay", latency="200ms"),
        name="x",
        namespace="gameday",
        component="agent",
        guard=GUARD,
    )
    obj2["spec"]["delay"]["latency"] = "200 ms"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj2, chaos_schema("NetworkChaos"))


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        ({"kind": "NetworkChaos", "action": "delay"}, "needs its amount"),
        ({"kind": "NetworkChaos", "action": "partition"}, "needs a peer"),
        ({"kind": "PodChaos", "action": "container-kill"}, "container_names"),
        ({"kind": "StressChaos"}, "cpu_workers or memory_workers"),
        ({"kind": "PodChaos", "action": "pod-kill", "mode": "fixed"}, "needs value"),
        ({"kind": "PodChaos", "action": "pod-kill", "selector": {}}, "Extra inputs"),
    ],
)
def test_chaos_params_reject_incomplete_objects(raw: dict[str, Any], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        ChaosMeshParams.model_validate(raw)


def test_chaos_builder_refuses_namespace_outside_allowlist() -> None:
    with pytest.raises(BlastRadiusError, match="not in the allowlist"):
        build(
            ChaosMeshParams(kind=ChaosKind.POD, action="pod-kill"),
            name="x",
            namespace="kube-system",
            component="agent",
            guard=GUARD,
        )


def test_go_duration() -> None:
    assert [go_duration(s) for s in (0.25, 1.0, 30.0, 1.5)] == ["250ms", "1s", "30s", "1500ms"]
