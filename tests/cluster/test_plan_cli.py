"""``faultday k8s plan``: the dry run lists exactly the objects that would be touched.
With --live, selectors are resolved: no cluster can run here; API stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_standin import KubeStandIn
from tests.conftest import faultday

from conftest import NS, REPO
from faultday.cluster.kubernetes import KubernetesStack
from faultday.cluster.plan import plan
from faultday.core.exits import ExitCode
from faultday.scenario.loader import load_scenario

SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: k8s-gpu, title: GPU node lost}
spec:
  stack: local
  duration: 60s
  load: {workload: chat, users: 4}
  faults:
    - {name: node, inject: node_gpu_loss, target: llm-primary, at: 10s, duration: 20s}
    - {name: kill, inject: pod_delete, target: tools, at: 5s, with: {count: 1}}
    - {name: slow, inject: chaos_mesh, target: agent, at: 20s, duration: 10s,
       with: {kind: NetworkChaos, action: delay, latency: 200ms, peer: qdrant}}
    - {name: lag, inject: latency, target: agent->qdrant, at: 30s, duration: 10s,
       with: {latency: 100ms}}
"""


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    f = tmp_path / "k8s.scenario.yaml"
    f.write_text(SCENARIO)
    return f


def _k8s(*args: str, cwd: Path) -> tuple[int, str]:
    """The real ``faultday k8s`` command: its exit status and its output (stdout, stderr)."""
    r = faultday("k8s", *args, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


def test_cli_plan_prints_every_object_without_calling_the_cluster(
    scenario_file: Path, tmp_path: Path
) -> None:
    (tmp_path / "stack").symlink_to(REPO / "stack")
    code, output = _k8s(
        "plan", "-p", "local", "-n", "gameday", "-s", str(scenario_file), cwd=tmp_path
    )
    assert code == ExitCode.PASSED, output
    lines = output.splitlines()
    assert lines[0].startswith("# dry run: profile local, namespace gameday, mode deploy")
    actions = [ln.split()[0] for ln in lines[1:]]
    # 24 stack objects, 3 fault deletes, and the load: ConfigMap, Service, 2 Jobs (1 worker).
    assert actions.count("apply") == 24 + 4 and actions.count("delete") == 24 + 1 + 1 + 1 + 4
    load = [ln for ln in lines if "faultday-load-<id>" in ln]
    assert [ln.split()[:2] for ln in load][:4] == [
        ["apply", "ConfigMap"],
        ["apply", "Service"],
        ["apply", "Job"],
        ["apply", "Job"],
    ]
    assert "1 worker pod (Indexed)" in load[3]
    # applied after the stack is up and before the faults; deleted after them, before down
    assert lines.index(load[3]) < next(i for i, ln in enumerate(lines) if "# fault" in ln)
    assert lines.index(load[4]) > max(i for i, ln in enumerate(lines) if "# revert" in ln)
    assert lines.index(load[-1]) < next(i for i, ln in enumerate(lines) if "# down" in ln)
    faults = [ln for ln in lines if "# fault" in ln or "# revert" in ln]
    assert [ln.split()[0] for ln in faults] == [
        "delete",
        "cordon+taint",
        "delete",
        "untaint+uncordon",
        "create",
        "delete",
        "toxic",
    ]
    assert (
        "gameday/-l app.kubernetes.io/part-of=faultday-local,app.kubernetes.io/name=tools"
        in faults[0]
    )
    assert "NetworkChaos gameday/faultday-slow-<id>" in faults[4]
    assert "agent_to_qdrant via http://qdrant.gameday.svc.cluster.local:8474" in faults[6]


def test_cli_rbac_and_manifests(tmp_path: Path) -> None:
    (tmp_path / "stack").symlink_to(REPO / "stack")
    code, output = _k8s("rbac", "-n", "team-a", "--no-node-access", cwd=tmp_path)
    assert code == ExitCode.PASSED, output
    assert "kind: RoleBinding" in output and "ClusterRole" not in output
    code, output = _k8s("manifests", "-n", "team-a", cwd=tmp_path)
    assert code == ExitCode.PASSED and output.count("namespace: team-a") == 24


def test_cli_refuses_a_namespace_outside_the_configs_allowlist(tmp_path: Path) -> None:
    (tmp_path / "stack").symlink_to(REPO / "stack")
    cfg = tmp_path / "target.yaml"
    cfg.write_text(
        "apiVersion: faultday/v1\nkind: KubernetesTarget\n"
        "spec: {namespace: gameday, allowed_namespaces: [gameday]}\n"
    )
    code, output = _k8s("plan", "-c", str(cfg), "-n", "prod", cwd=tmp_path)
    assert code == ExitCode.ERROR
    assert "namespace 'prod' is not in the allowlist" in output
    cfg.write_text("apiVersion: faultday/v1\nkind: KubernetesTarget\nspec: {namespce: x}\n")
    code, output = _k8s("plan", "-c", str(cfg), cwd=tmp_path)
    assert code == ExitCode.INVALID and "target.yaml:3:8: spec.namespce: unknown key" in output


def test_live_plan_resolves_pods_and_node(
    k8s_stack: KubernetesStack, standin: KubeStandIn, scenario_file: Path
) -> None:
    """No cluster can run here; API stand-in. A live plan only reads."""
    k8s_stack.up()
    n = len(standin.calls())
    touches = plan(k8s_stack, scenario=load_scenario(scenario_file).scenario, live=True)
    assert all(c.startswith("GET ") for c in standin.calls()[n:])
    faults = [t for t in touches if "fault" in t.why]
    assert faults[0].kind == "Pod" and faults[0].name.startswith("tools-")
    assert (faults[1].action, faults[1].name) == ("cordon+taint", "gpu-node-1")
    assert faults[2].name.startswith("llm-primary-") and faults[2].namespace == NS
