"""A Kubernetes fault from a plugin is planned by what it declares: no list in plan.py.

Each test installs a throwaway plugin package (module and entry points) into a
temporary site folder, as a ``pip install`` would, and reads it back through the
injector registry; the CLI test runs the real ``faultday k8s plan`` on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import faultday

from conftest import REPO
from faultday.cluster.plan import kubernetes_injectors
from faultday.core.exits import ExitCode
from faultday.injectors.base import injector_registry

PLUGIN = '''\
"""Throwaway faults for the plan's tests."""

from __future__ import annotations

from typing import ClassVar

from faultday.cluster.kubernetes import KubernetesStack, Touch
from faultday.cluster.plan import component_pods
from faultday.core.targets import Revert, Target
from faultday.injectors.base import FaultContext, Injector, NoParams, NoRevertData


class _Nothing(Injector[NoParams, NoRevertData]):
    Params = NoParams
    Data = NoRevertData

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        return self.record(target, fault=fault, action="none", data=NoRevertData())

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        pass

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        pass


class PodFreeze(_Nothing):
    """A Kubernetes fault that says nothing of its objects: the plan names the pods."""

    name: ClassVar[str] = "pod_freeze_example"
    drivers: ClassVar[frozenset[str]] = frozenset({"kubernetes"})


class PodEvict(_Nothing):
    """A Kubernetes fault that lists its objects itself (a PlannedFault)."""

    name: ClassVar[str] = "pod_evict_example"
    drivers: ClassVar[frozenset[str]] = frozenset({"kubernetes"})

    def touches(self, stack, fault, *, cluster):
        return [
            Touch("evict", "Pod", stack.namespace, p, f"fault {fault.name}: evicted")
            for p in component_pods(stack, fault.target, cluster)
        ]


class LocalOnly(_Nothing):
    """A fault that declares no driver: it touches no cluster object."""

    name: ClassVar[str] = "local_only_example"
'''

ENTRY_POINTS = """\
[faultday.injectors]
pod_freeze_example = k8s_fault_example:PodFreeze
pod_evict_example = k8s_fault_example:PodEvict
local_only_example = k8s_fault_example:LocalOnly
"""

SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: plugin-faults, title: Faults from a plugin}
spec:
  stack: local
  duration: 60s
  load: {workload: none}
  faults:
    - {name: freeze, inject: pod_freeze_example, target: tools, at: 5s, duration: 5s}
    - {name: evict, inject: pod_evict_example, target: agent, at: 10s}
    - {name: local, inject: local_only_example, target: redis, at: 15s}
"""


def _install(site: Path) -> Path:
    site.mkdir()
    (site / "k8s_fault_example.py").write_text(PLUGIN)
    info = site / "k8s_fault_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: k8s-fault-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plugin, installed for this process and for the commands it runs."""
    folder = _install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", str(folder))
    return folder


def test_kubernetes_faults_are_those_that_declare_the_driver(site: Path) -> None:
    found = kubernetes_injectors()
    assert {"pod_freeze_example", "pod_evict_example"} <= found
    assert {"pod_delete", "node_gpu_loss", "chaos_mesh"} <= found  # the built-in ones
    assert "local_only_example" not in found
    assert not {"latency", "process_kill", "container_kill"} & found
    registry = injector_registry()
    for name in ("container_kill", "container_pause", "container_restart", "network_disconnect"):
        assert registry.get(name).drivers == {"docker"}, name  # they act through docker alone
    assert registry.get("latency").drivers is None  # a proxy fault works on any driver


def test_cli_plan_lists_a_plugin_faults_objects(site: Path, tmp_path: Path) -> None:
    (tmp_path / "stack").symlink_to(REPO / "stack")
    scenario = tmp_path / "plugin.scenario.yaml"
    scenario.write_text(SCENARIO)
    r = faultday("k8s", "plan", "-p", "local", "-n", "gameday", "-s", str(scenario), cwd=tmp_path)
    assert r.returncode == ExitCode.PASSED, r.stdout + r.stderr
    faults = [ln for ln in r.stdout.splitlines() if "# fault" in ln]
    selector = "gameday/-l app.kubernetes.io/part-of=faultday-local,app.kubernetes.io/name="
    freeze, evict, local = faults
    assert freeze.split()[:2] == ["fault", "Pod"]
    assert f"{selector}tools" in freeze and "pod_freeze_example acts on these" in freeze
    assert evict.split()[:2] == ["evict", "Pod"] and f"{selector}agent" in evict
    assert local.split()[0] == "none" and "touches no cluster object" in local
