"""pod_delete, node_gpu_loss and chaos_mesh. No cluster can run here; API stand-in
(kube_standin.py): the official client against a real HTTP server that records every
call, so the tests assert which calls are made, in which order, and that reverts run
when an injection fails halfway."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_standin import KubeStandIn

from conftest import LLM_LABELS, NS, PART_OF, Ctx, engine_inject
from faultday.cluster.guards import BlastRadiusError
from faultday.cluster.k8s_faults import ChaosMesh, NodeGpuLoss, PodDelete
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.ledger import Ledger
from faultday.engine.recover import recover_run
from faultday.errors import InjectionError
from faultday.injectors.base import injector_registry

GPU = {"nvidia.com/gpu.present": "true"}
NODE = "/api/v1/nodes/gpu-node-1"
TAINT = {"key": "nvidia.com/gpu", "value": "unhealthy", "effect": "NoSchedule"}


@pytest.fixture
def up(k8s_stack: KubernetesStack, standin: KubeStandIn, tmp_path: Path) -> Ctx:
    standin.add_node("gpu-node-1", labels=GPU)
    k8s_stack.up()
    return Ctx(run_dir=tmp_path, stack=k8s_stack)


def _since(standin: KubeStandIn, n: int) -> list[str]:
    return standin.calls()[n:]


def test_registered_by_short_name() -> None:
    reg = injector_registry()
    assert reg.get("pod_delete") is PodDelete
    assert reg.get("node_gpu_loss") is NodeGpuLoss
    assert reg.get("chaos_mesh") is ChaosMesh


# -- pod_delete ---------------------------------------------------------------------------


def test_pod_delete_percent_of_labelled_pods(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in."""
    for i in range(3):
        standin.add_pod(NS, f"llm-primary-extra-{i}", labels=LLM_LABELS)
    n = len(standin.calls())
    revert = engine_inject(PodDelete(), up, "llm-primary", {"percent": 50, "seed": 7})
    calls = _since(standin, n)
    assert calls[0] == f"GET /api/v1/namespaces/{NS}/pods"
    with standin.lock:
        sel = standin.state.calls[n].query["labelSelector"]
    assert sel == f"app.kubernetes.io/part-of={PART_OF},app.kubernetes.io/name=llm-primary"
    deletes = [c for c in calls if c.startswith("DELETE")]
    assert len(deletes) == 2  # ceil(4 * 50%)
    PodDelete().revert(up, revert)  # waits for the Deployment: ready at once here


def test_pod_delete_refuses_a_pod_without_the_stack_label(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in. The guard runs before the DELETE is sent."""
    stack = up.stack
    assert isinstance(stack, KubernetesStack)
    standin.add_pod(NS, "intruder", labels={"app.kubernetes.io/name": "llm-primary"})
    pods = stack.cluster.list_pods(NS)
    assert "intruder" not in {p.name for p in pods}  # the selector never lists it
    from faultday.cluster.client import PodRef

    fake = PodRef(
        "intruder", NS, "gpu-node-1", {"app.kubernetes.io/name": "x"}, "Running", True, 0, False
    )
    n = len(standin.calls())
    with pytest.raises(BlastRadiusError, match="not labelled"):
        stack.cluster.delete_pod(fake)
    assert _since(standin, n) == []


def test_pod_delete_with_no_pods_fails_cleanly(up: Ctx, standin: KubeStandIn) -> None:
    for name, pod in standin.objects("pods", NS).items():
        if pod["metadata"]["labels"]["app.kubernetes.io/name"] == "tools":
            with standin.lock:
                del standin.state.objects[(NS, "pods", name)]
    with pytest.raises(InjectionError, match="no pods of tools"):
        engine_inject(PodDelete(), up, "tools", {"count": 1, "wait_ready": None})


# -- node_gpu_loss ------------------------------------------------------------------------


def _node_state(standin: KubeStandIn) -> tuple[bool, list[dict[str, str]]]:
    spec = standin.node("gpu-node-1")["spec"]
    return bool(spec.get("unschedulable")), list(spec.get("taints") or [])


def test_node_gpu_loss_cordons_taints_deletes_then_reverts(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in.

    Order: cordon, taint, delete; the revert: untaint, uncordon."""
    n = len(standin.calls())
    revert = engine_inject(NodeGpuLoss(), up, "llm-primary", {})
    calls = [c for c in _since(standin, n) if not c.startswith("GET")]
    assert calls[0] == f"PATCH {NODE}"
    assert calls[1] == f"PATCH {NODE}"
    assert calls[2].startswith(f"DELETE /api/v1/namespaces/{NS}/pods/llm-primary-")
    assert len(calls) == 3
    with standin.lock:
        patches = [c.body for c in standin.state.calls[n:] if c.method == "PATCH"]
    assert patches == [{"spec": {"unschedulable": True}}, {"spec": {"taints": [TAINT]}}]
    assert _node_state(standin) == (True, [TAINT])

    m = len(standin.calls())
    NodeGpuLoss().revert(up, revert)
    with standin.lock:
        patches = [c.body for c in standin.state.calls[m:] if c.method == "PATCH"]
    assert patches == [{"spec": {"taints": []}}, {"spec": {"unschedulable": False}}]
    assert _node_state(standin) == (False, [])
    k = len(standin.calls())
    NodeGpuLoss().revert(up, revert)  # idempotent: reads, changes nothing
    assert [c for c in _since(standin, k) if not c.startswith("GET")] == []


def test_taint_failure_after_cordon_reverts_the_cordon(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in. The taint PATCH fails after the cordon
    succeeded: the engine's revert uncordons the node, and no pod was deleted."""
    standin.fail("PATCH", NODE, status=500, when=lambda body: "taints" in body["spec"])
    pods_before = set(standin.objects("pods", NS))
    n = len(standin.calls())
    with pytest.raises(InjectionError, match="patch taints of node gpu-node-1: 500"):
        engine_inject(NodeGpuLoss(), up, "llm-primary", {})
    with standin.lock:
        muts = [(c.method, c.path, c.body) for c in standin.state.calls[n:] if c.method != "GET"]
    assert muts == [
        ("PATCH", NODE, {"spec": {"unschedulable": True}}),  # cordon: ok
        ("PATCH", NODE, {"spec": {"taints": [TAINT]}}),  # taint: 500
        ("PATCH", NODE, {"spec": {"unschedulable": False}}),  # revert: uncordon
    ]
    assert _node_state(standin) == (False, [])
    assert set(standin.objects("pods", NS)) == pods_before
    assert Ledger.in_dir(up.run_dir).outstanding_reverts() == []


def test_node_gpu_loss_leaves_a_node_cordoned_by_someone_else_cordoned(
    up: Ctx, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in."""
    other = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    standin.add_node("gpu-node-1", labels=GPU, unschedulable=True, taints=[other])
    revert = engine_inject(NodeGpuLoss(), up, "llm-primary", {"delete_pods": False})
    assert _node_state(standin) == (True, [other, TAINT])
    NodeGpuLoss().revert(up, revert)
    assert _node_state(standin) == (True, [other])


def test_node_gpu_loss_refuses_a_node_without_the_gpu_label(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in."""
    standin.add_node("gpu-node-1", labels={"kubernetes.io/os": "linux"})
    n = len(standin.calls())
    with pytest.raises(BlastRadiusError, match=r"lacks the label nvidia\.com/gpu\.present=true"):
        engine_inject(NodeGpuLoss(), up, "llm-primary", {})
    assert [c for c in _since(standin, n) if not c.startswith("GET")] == []


def test_node_gpu_loss_refuses_a_node_not_running_the_stack(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in."""
    standin.add_node("cpu-node-9", labels=GPU)
    with pytest.raises(BlastRadiusError, match="node cpu-node-9 runs no pod labelled"):
        engine_inject(NodeGpuLoss(), up, "llm-primary", {"node": "cpu-node-9"})
    assert _node_state(standin) == (False, [])


def test_recover_after_a_harness_crash_uncordons_from_the_ledger(
    up: Ctx, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in. The harness dies after the fault took effect;
    `faultday recover` (no live stack) rebuilds the client from the revert's data."""
    engine_inject(NodeGpuLoss(), up, "llm-primary", {})
    assert _node_state(standin) == (True, [TAINT])
    result = recover_run(up.run_dir, stop_processes=False)
    assert (result.reverted, result.failed) == (1, 0)
    assert _node_state(standin) == (False, [])


# -- chaos_mesh -----------------------------------------------------------------------------


def test_chaos_mesh_creates_then_deletes_and_waits_until_gone(
    up: Ctx, standin: KubeStandIn
) -> None:
    """No cluster can run here; API stand-in (deleted objects linger for two GETs, like
    Chaos Mesh's finalizer recovering the fault)."""
    standin.state.chaos_linger = 2
    raw = {"kind": "NetworkChaos", "action": "delay", "latency": "300ms", "peer": "qdrant"}
    n = len(standin.calls())
    revert = engine_inject(ChaosMesh(), up, "agent", raw, fault="slow-qdrant")
    base = f"/apis/chaos-mesh.org/v1alpha1/namespaces/{NS}/networkchaos"
    assert _since(standin, n) == [f"POST {base}"]
    name = str(revert.data["name"])
    assert name.startswith("faultday-slow-qdrant-")
    obj = standin.objects("networkchaos", NS)[name]
    assert obj["spec"]["delay"] == {"latency": "300ms"}
    assert obj["spec"]["selector"]["labelSelectors"]["app.kubernetes.io/part-of"] == PART_OF
    m = len(standin.calls())
    ChaosMesh().revert(up, revert)
    assert _since(standin, m) == [f"DELETE {base}/{name}"] + [f"GET {base}/{name}"] * 3
    ChaosMesh().revert(up, revert)  # idempotent


def test_chaos_mesh_not_installed_is_an_injection_error(up: Ctx, standin: KubeStandIn) -> None:
    """No cluster can run here; API stand-in (answers 404 for chaos-mesh.org like a cluster
    without the CRDs)."""
    standin.state.chaos_installed = False
    with pytest.raises(InjectionError, match="Chaos Mesh is not installed"):
        engine_inject(ChaosMesh(), up, "agent", {"kind": "PodChaos", "action": "pod-kill"})
    assert Ledger.in_dir(up.run_dir).outstanding_reverts() == []


def test_chaos_mesh_refuses_an_unknown_peer(up: Ctx) -> None:
    with pytest.raises(InjectionError, match="peer 'vault' is not a component"):
        engine_inject(
            ChaosMesh(),
            up,
            "agent",
            {"kind": "NetworkChaos", "action": "partition", "peer": "vault"},
        )


def test_injectors_need_the_kubernetes_driver(tmp_path: Path) -> None:
    ctx = Ctx(run_dir=tmp_path, stack=object())
    from faultday.core.targets import Target, TargetKind

    t = Target(name="agent", kind=TargetKind.COMPONENT)
    with pytest.raises(InjectionError, match="needs the kubernetes driver"):
        PodDelete().prepare(ctx, t, PodDelete().parse({}), fault="f")
