"""The Kubernetes driver. No cluster can run here; API stand-in (kube_standin.py): a real
HTTP server the official client talks to; the tests assert the calls and their order."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_standin import KubeStandIn

from conftest import NS, k8s_config
from faultday.cluster.config import DeployMode, EndpointMode
from faultday.cluster.guards import BlastRadiusError
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile
from faultday.core.targets import TargetKind
from faultday.errors import StackError

DEPLOYS = ["redis", "triton", "qdrant", "llm-primary", "llm-backup", "llm-canary", "tools", "agent"]


def test_up_applies_every_rendered_object_in_order_then_waits(
    k8s_stack: KubernetesStack, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in. ConfigMaps, then Services, then Deployments."""
    k8s_stack.up()
    patches = [c for c in standin.calls() if c.startswith("PATCH")]
    kinds = [p.split("/")[-2] for p in patches]
    first = {k: kinds.index(k) for k in ("configmaps", "services", "deployments")}
    assert first["configmaps"] < first["services"] < first["deployments"]
    assert kinds.count("deployments") == len(DEPLOYS)
    assert all(f"/namespaces/{NS}/" in p for p in patches)
    # every apply is a server-side apply by the faultday field manager
    with standin.lock:
        applies = [c for c in standin.state.calls if c.method == "PATCH"]
    assert {c.content_type for c in applies} == {"application/apply-patch+yaml"}
    assert {c.query.get("fieldManager") for c in applies} == {"faultday"}
    # after the applies, a readiness read of each Deployment, none before the last apply
    last_patch = max(i for i, c in enumerate(standin.calls()) if c.startswith("PATCH"))
    reads = [c for c in standin.calls()[last_patch + 1 :] if "/deployments/" in c]
    assert [r.rsplit("/", 1)[1] for r in reads] == DEPLOYS
    assert set(standin.objects("deployments", NS)) == set(DEPLOYS)


def test_up_times_out_when_a_deployment_never_becomes_ready_and_cleans_up(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. A failed deploy deletes what it applied."""
    standin.state.auto_ready = False
    stack = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, ready_timeout="1s"),
    )
    with pytest.raises(StackError, match="redis ready: not within"):
        stack.up()
    assert standin.objects("deployments", NS) == {}
    assert standin.objects("configmaps", NS) == {}
    assert standin.objects("services", NS) == {}


def test_down_deletes_workloads_before_what_they_mount(
    k8s_stack: KubernetesStack, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in."""
    k8s_stack.up()
    n = len(standin.calls())
    k8s_stack.down()
    deletes = [c for c in standin.calls()[n:] if c.startswith("DELETE")]
    kinds = [d.split("/")[-2] for d in deletes]
    assert kinds == sorted(kinds, key=["deployments", "services", "configmaps"].index)
    assert standin.objects("deployments", NS) == {} and standin.objects("configmaps", NS) == {}
    k8s_stack.down()  # idempotent: 404s are fine


def test_attach_mode_changes_nothing(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. The user's stack is only read."""
    deploy = KubernetesStack(
        profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=k8s_config(standin)
    )
    deploy.up()  # someone else's deploy
    n = len(standin.calls())
    attach = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, mode=DeployMode.ATTACH),
    )
    attach.up()
    attach.down()
    assert [c for c in standin.calls()[n:] if not c.startswith("GET")] == []
    assert set(standin.objects("deployments", NS)) == set(DEPLOYS)


def test_attach_refuses_an_unlabelled_deployment(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in."""
    other = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, part_of="someone-else"),
    )
    other.up()
    attach = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, mode=DeployMode.ATTACH),
    )
    with pytest.raises(
        BlastRadiusError, match=r"not labelled app\.kubernetes\.io/part-of=faultday-local"
    ):
        attach.up()


def test_namespace_outside_allowlist_is_refused_before_any_call(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in."""
    with pytest.raises(BlastRadiusError, match="not in the allowlist"):
        KubernetesStack(
            profile,
            run_dir=tmp_path,
            ledger=Ledger.in_dir(tmp_path),
            config=k8s_config(standin, allowed_namespaces=("staging",)),
        )
    assert standin.calls() == []


def test_restart_deletes_pods_and_waits_for_new_ready_ones(
    k8s_stack: KubernetesStack, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in (its controller replaces deleted pods)."""
    k8s_stack.up()
    before = set(standin.objects("pods", NS))
    old = {
        n
        for n, p in standin.objects("pods", NS).items()
        if p["metadata"]["labels"]["app.kubernetes.io/name"] == "llm-primary"
    }
    n = len(standin.calls())
    k8s_stack.restart("llm-primary", timeout=5)
    assert [c for c in standin.calls()[n:] if c.startswith("DELETE")] == [
        f"DELETE /api/v1/namespaces/{NS}/pods/{p}" for p in sorted(old)
    ]
    after = set(standin.objects("pods", NS))
    assert old.isdisjoint(after) and len(after) == len(before)
    with pytest.raises(StackError, match="no component 'llm-primry'; did you mean 'llm-primary'"):
        k8s_stack.restart("llm-primry", timeout=1)


def test_endpoints_targets_versions_describe(k8s_stack: KubernetesStack) -> None:
    k8s_stack.up()
    eps = k8s_stack.endpoints()
    assert eps["agent"] == f"http://agent.{NS}.svc.cluster.local:8080"
    assert eps["redis"] == f"redis://redis.{NS}.svc.cluster.local:6379"
    t = k8s_stack.target("llm-primary")
    assert t.kind == TargetKind.COMPONENT and t.component_type == "llmsim"
    # The base URL, as the process and docker drivers give it: the injectors add the path.
    assert t.admin_url == eps["llm-primary"]
    assert k8s_stack.target("redis").admin_url == ""
    e = k8s_stack.target("agent->qdrant")
    assert e.kind == TargetKind.EDGE
    assert e.proxy_api == f"http://qdrant.{NS}.svc.cluster.local:8474"
    assert e.proxy_name == "agent_to_qdrant"
    assert e.url.startswith(f"qdrant.{NS}.svc.cluster.local:200")
    assert k8s_stack.versions()["qdrant"].startswith("qdrant/qdrant:")
    info = k8s_stack.describe()
    assert {c.name: c.health for c in info.components} == dict.fromkeys(DEPLOYS, "ready")
    assert "agent->tools" in {x.name for x in info.edges}
    with pytest.raises(StackError, match="pause is not supported"):
        k8s_stack.pause("agent")


def test_port_forward_argv(standin: KubeStandIn, profile: StackProfile, tmp_path: Path) -> None:
    cfg = k8s_config(standin, endpoints=EndpointMode.PORT_FORWARD)
    stack = KubernetesStack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=cfg)
    assert stack.port_forward_argv("agent", 8080) == [
        "kubectl",
        "port-forward",
        "-n",
        NS,
        "svc/agent",
        ":8080",
    ]
