"""The drivers' own stack objects after a killed harness: ``k8s_stack`` and ``docker_stack``.

No cluster and no Docker engine can run here, so the Kubernetes API and the Docker
Engine API are stand-ins (kube_standin.py, docker_standin.py): real HTTP servers the
official ``kubernetes`` client and the ``docker`` SDK talk to. The harness is the real
``faultday run`` in its own process, SIGKILLed after ``up``; the clean-up is the real
``faultday recover <run_dir>`` command, also in its own process.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_standin import DockerStandIn
from kube_standin import KubeStandIn

from conftest import NS, PART_OF, REPO, k8s_config
from faultday.cluster.config import PART_OF_LABEL, STACK_RUN_LABEL, DeployMode
from faultday.cluster.docker import DockerConfig, DockerStack
from faultday.cluster.kubernetes import KubernetesStack
from faultday.core.journal import RunVerdict
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile
from faultday.engine.recover import find_ledgers
from faultday.engine.runner import Run, RunOptions
from faultday.engine.stacks import default_stack_factory
from faultday.scenario.loader import load_scenario

KINDS = {"deployments": "Deployment", "services": "Service", "configmaps": "ConfigMap"}


@pytest.fixture
def engine() -> Iterator[DockerStandIn]:
    s = DockerStandIn().start()
    try:
        yield s
    finally:
        s.stop()


def _scenario(tmp_path: Path, *, duration: str) -> Path:
    """No load (nothing to serve it here) and no faults: only the stack's lifecycle."""
    path = tmp_path / "stack-only.scenario.yaml"
    path.write_text(
        "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: stack-only}\n"
        f"spec:\n  stack: local\n  duration: {duration}\n  warmup: 0s\n"
        "  load: {workload: none}\n"
    )
    return path


def _k8s_config_file(tmp_path: Path, standin: KubeStandIn) -> Path:
    cfg = {
        "apiVersion": "faultday/v1",
        "kind": "KubernetesTarget",
        "spec": {
            "namespace": NS,
            "ready_timeout": "5s",
            "access": {"host": standin.url, "request_timeout": 5},
        },
    }
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _harness(args: list[str], *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "faultday.cli", "run", *args, "--no-progress"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _sigkill_when(harness: subprocess.Popen[bytes], ready: Callable[[], object]) -> None:
    try:
        end = time.monotonic() + 60
        while not ready():
            assert harness.poll() is None, f"the harness exited early ({harness.returncode})"
            assert time.monotonic() < end, "timed out waiting for the stack to be up"
            time.sleep(0.05)
        harness.send_signal(signal.SIGKILL)
        assert harness.wait(10) == -signal.SIGKILL
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)


def _recover(
    run_dir: Path, *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real ``faultday recover`` command, in its own process (like a user after a crash)."""
    return subprocess.run(
        [sys.executable, "-m", "faultday.cli", "recover", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env if env is not None else {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"},
    )


def _records(run_dir: Path, injector: str) -> list[dict[str, Any]]:
    """One driver's cleanup records and their ``cleanup_done`` lines, in ledger order."""
    ids: set[object] = set()
    out: list[dict[str, Any]] = []
    for r in Ledger.in_dir(run_dir).records():
        rec = r.get("cleanup")
        if r["op"] == "cleanup" and isinstance(rec, dict) and rec["injector"] == injector:
            ids.add(rec["id"])
            out.append(r)
        elif r["op"] == "cleanup_done" and r["id"] in ids:
            out.append(r)
    return out


def _stack_objects(standin: KubeStandIn) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (KINDS[plural], name): obj
        for plural in KINDS
        for name, obj in standin.objects(plural, NS).items()
    }


# -- Kubernetes ---------------------------------------------------------------------------


def test_k8s_recover_after_sigkill_deletes_every_stack_object(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. `faultday run --driver kubernetes` is SIGKILLed
    after `up`; `faultday recover <run_dir>` deletes every object the driver applied, from
    the record in the run's ledger; a second recover finds nothing outstanding."""
    report = tmp_path / "r"
    harness = _harness(
        [
            str(_scenario(tmp_path, duration="120s")),
            "--driver",
            "kubernetes",
            "--driver-config",
            str(_k8s_config_file(tmp_path, standin)),
            "--report-dir",
            str(report),
        ]
    )
    # `up` has returned once the run describes the stack (it lists the pods).
    _sigkill_when(
        harness, lambda: any("/pods?" in c or c.endswith("/pods") for c in standin.calls())
    )
    (run_dir,) = [d for d in report.iterdir() if d.is_dir()]
    left = _stack_objects(standin)
    assert len(left) == 24 and ("Deployment", "agent") in left  # nobody cleaned up

    (rec,) = [r["cleanup"] for r in _records(run_dir, "k8s_stack")]
    data = rec["data"]
    assert rec["target"] == f"{NS}/{PART_OF}" and data["namespace"] == NS
    assert data["guard"] == {"namespaces": [NS], "part_of": PART_OF}
    recorded = [(kind, name) for _, kind, name in data["objects"]]
    assert set(recorded) == set(left)  # every object applied, and nothing else
    # Delete order: workloads before what they mount.
    kinds = [k for k, _ in recorded]
    assert kinds == sorted(kinds, key=["Deployment", "Service", "ConfigMap"].index)
    # Every object carries the stack's label and this deploy's own.
    assert {o["metadata"]["labels"][PART_OF_LABEL] for o in left.values()} == {PART_OF}
    assert {o["metadata"]["labels"][STACK_RUN_LABEL] for o in left.values()} == {data["run"]}
    assert find_ledgers(report) == [run_dir]

    n = len(standin.calls())
    r = _recover(run_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"cleaned up k8s_stack {NS}/{PART_OF} (delete_stack_objects)" in r.stdout
    lines = [ln.split(": ", 1)[1].strip() for ln in r.stdout.splitlines() if "deleted " in ln]
    assert lines == [f"deleted {kind} {NS}/{name}" for kind, name in recorded]
    # Each object read (the guard sees its labels), then deleted, in the recorded order.
    calls = standin.calls()[n:]
    assert [c.split()[0] for c in calls] == ["GET", "DELETE"] * len(recorded)
    assert [c.rsplit("/", 1)[1] for c in calls[1::2]] == [name for _, name in recorded]
    assert _stack_objects(standin) == {}
    assert standin.objects("pods", NS) == {}  # the Deployments' pods went with them
    assert Ledger.in_dir(run_dir).outstanding_cleanups() == []
    assert find_ledgers(report) == []

    n = len(standin.calls())
    again = _recover(run_dir)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().endswith("nothing outstanding")
    assert len(standin.calls()) == n


def test_k8s_a_normal_run_records_before_the_first_apply_and_leaves_nothing_outstanding(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in."""
    run_dir = tmp_path / "run"
    at_first_apply: list[list[str]] = []

    def look(_body: object) -> bool:
        at_first_apply.append([str(r["op"]) for r in _records(run_dir, "k8s_stack")])
        return False  # only looks; the apply goes through

    standin.fail("PATCH", rf"/api/v1/namespaces/{NS}/configmaps/.*", when=look)
    run = Run(
        load_scenario(_scenario(tmp_path, duration="1s")),
        RunOptions(
            base_dir=REPO,
            run_dir=run_dir,
            participants=[],
            driver="kubernetes",
            driver_config=_k8s_config_file(tmp_path, standin),
        ),
    )
    journal = run.execute(default_stack_factory)
    assert journal.verdict == RunVerdict.PASSED, (journal.reason, journal.errors)
    # Looked at each ConfigMap apply (the first objects applied): the record was already there.
    assert at_first_apply == [["cleanup"]] * 8
    assert [r["op"] for r in _records(run_dir, "k8s_stack")] == ["cleanup", "cleanup_done"]
    assert Ledger.in_dir(run_dir).outstanding_cleanups() == []
    assert _stack_objects(standin) == {}


def test_k8s_recover_refuses_objects_that_are_not_this_deploys(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. After a crash, two names are someone else's:
    an unlabelled ConfigMap, and a Service another deploy re-applied (its stack-run label).
    Recover deletes every other object, refuses those two, says so, exits non-zero and
    leaves the record outstanding."""
    stack = KubernetesStack(
        profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=k8s_config(standin)
    )
    stack.up()
    stack.cluster.close()  # the harness dies here: no down()
    with standin.lock:
        cm = standin.state.objects[(NS, "configmaps", "redis-toxiproxy")]
        foreign = copy.deepcopy(cm)
        foreign["metadata"]["labels"] = {"team": "search"}
        standin.state.objects[(NS, "configmaps", "redis-toxiproxy")] = foreign
        svc = standin.state.objects[(NS, "services", "agent")]
        svc["metadata"]["labels"][STACK_RUN_LABEL] = "0ther0ne"

    r = _recover(tmp_path)
    assert r.returncode != 0
    out = " ".join(r.stdout.split())  # rich may wrap the long line
    assert f"FAILED to clean up k8s_stack {NS}/{PART_OF}" in out
    assert f"ConfigMap {NS}/redis-toxiproxy is not labelled {PART_OF_LABEL}={PART_OF}" in out
    assert f"Service {NS}/agent: not labelled {STACK_RUN_LABEL}=" in out
    assert f"-l {STACK_RUN_LABEL}=" in out  # how to look for what is left
    assert set(_stack_objects(standin)) == {("ConfigMap", "redis-toxiproxy"), ("Service", "agent")}
    deleted = [c for c in standin.calls(mutating=True) if c.startswith("DELETE")]
    assert not [c for c in deleted if c.endswith(("/redis-toxiproxy", "/services/agent"))]
    assert len(Ledger.in_dir(tmp_path).outstanding_cleanups()) == 1


def test_k8s_attach_mode_records_nothing(
    standin: KubeStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. Attach deploys nothing, so nothing to clean up."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    KubernetesStack(
        profile, run_dir=theirs, ledger=Ledger.in_dir(theirs), config=k8s_config(standin)
    ).up()
    attach = KubernetesStack(
        profile,
        run_dir=mine,
        ledger=Ledger.in_dir(mine),
        config=k8s_config(standin, mode=DeployMode.ATTACH),
    )
    attach.up()
    attach.down()
    assert Ledger.in_dir(mine).records() == []


# -- Docker --------------------------------------------------------------------------------


def _running(engine: DockerStandIn) -> int:
    with engine.lock:
        return sum(1 for c in engine.containers.values() if c["State"].get("Running"))


def _official_images(tmp_path: Path) -> Path:
    """The stand-in plays the official images; faultday's own runs in tests/docker."""
    f = tmp_path / "docker-target.yaml"
    f.write_text("apiVersion: faultday/v1\nkind: DockerTarget\nspec: {images: official}\n")
    return f


def _docker_services(profile: StackProfile, tmp_path: Path) -> list[str]:
    return DockerStack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path)).start_order()


def test_docker_recover_after_sigkill_removes_containers_and_network(
    engine: DockerStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No Docker engine can run here; Engine API stand-in. `faultday run --driver docker`
    (DOCKER_HOST pointing at the stand-in) is SIGKILLed after `up`; `faultday recover`,
    run WITHOUT DOCKER_HOST, reaches the same engine from the record and removes every
    container and then the network; a second recover finds nothing outstanding."""
    services = _docker_services(profile, tmp_path / "plan")
    report = tmp_path / "r"
    harness = _harness(
        [
            str(_scenario(tmp_path, duration="120s")),
            "--driver",
            "docker",
            "--driver-config",
            str(_official_images(tmp_path)),
            "--report-dir",
            str(report),
        ],
        env={"DOCKER_HOST": engine.url},
    )
    _sigkill_when(harness, lambda: _running(engine) == len(services))
    (run_dir,) = [d for d in report.iterdir() if d.is_dir()]
    assert len(engine.containers) == len(services) and len(engine.networks) == 1

    (rec,) = [r["cleanup"] for r in _records(run_dir, "docker_stack")]
    data = rec["data"]
    names = [f"faultday-local-{s}" for s in reversed(services)]
    assert data["containers"] == names and data["network"] == "faultday-local"
    assert data["access"]["docker_host"] == engine.url
    with engine.lock:
        labels = [c["Config"]["Labels"] for c in engine.containers.values()]
        labels += [n["Labels"] for n in engine.networks.values()]
    assert {lb[PART_OF_LABEL] for lb in labels} == {PART_OF}
    assert {lb[STACK_RUN_LABEL] for lb in labels} == {data["run"]}

    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env.update(COLUMNS="250", NO_COLOR="1")
    n = len(engine.calls())
    r = _recover(run_dir, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"cleaned up docker_stack {PART_OF} (remove_containers_and_network)" in r.stdout
    lines = [ln.split(": ", 1)[1].strip() for ln in r.stdout.splitlines() if "removed " in ln]
    assert lines == [*(f"removed container {c}" for c in names), "removed network faultday-local"]
    deletes = [c for c in engine.calls()[n:] if c.startswith("DELETE")]
    assert len(deletes) == len(names) + 1 and deletes[-1].startswith("DELETE /networks/")
    with engine.lock:
        forced = [c.query.get("force") for c in engine.calls_[n:] if c.method == "DELETE"]
    assert forced[:-1] == ["True"] * len(names)  # running containers are removed too
    assert engine.containers == {} and engine.networks == {}
    assert Ledger.in_dir(run_dir).outstanding_cleanups() == []

    n = len(engine.calls())
    again = _recover(run_dir, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().endswith("nothing outstanding")
    assert len(engine.calls()) == n


def test_docker_a_normal_run_records_before_the_network_and_leaves_nothing_outstanding(
    engine: DockerStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Docker engine can run here; Engine API stand-in."""
    run_dir = tmp_path / "run"
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    seen: list[list[str]] = []
    handle = engine.handle

    def look(method: str, path: str, q: dict[str, str], body: Any) -> tuple[int, Any]:
        if path == "/networks/create":
            seen.append([str(r["op"]) for r in _records(run_dir, "docker_stack")])
        return handle(method, path, q, body)

    monkeypatch.setattr(engine, "handle", look)
    run = Run(
        load_scenario(_scenario(tmp_path, duration="1s")),
        RunOptions(
            base_dir=REPO,
            run_dir=run_dir,
            participants=[],
            driver="docker",
            driver_config=_official_images(tmp_path),
        ),
    )
    journal = run.execute(default_stack_factory)
    assert journal.verdict == RunVerdict.PASSED, (journal.reason, journal.errors)
    assert seen == [["cleanup"]]
    assert [r["op"] for r in _records(run_dir, "docker_stack")] == ["cleanup", "cleanup_done"]
    assert Ledger.in_dir(run_dir).outstanding_cleanups() == []
    assert engine.containers == {} and engine.networks == {}


def test_docker_recover_refuses_a_foreign_container_of_the_same_name(
    engine: DockerStandIn, profile: StackProfile, tmp_path: Path
) -> None:
    """No Docker engine can run here; Engine API stand-in. After a crash, the redis
    container's name belongs to an unlabelled container: it is refused, every other
    container and the network are removed, the record stays outstanding."""
    # The stand-in plays the official images (pulls, Toxiproxy); faultday's own image
    # runs on the real engine in tests/docker.
    cfg = DockerConfig(base_url=engine.url, timeout=5, ready_timeout=5, images="official")
    stack = DockerStack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=cfg)
    stack.up()  # the harness dies after this: no down()
    with engine.lock:
        ours = next(c for c in engine.containers.values() if c["Name"] == "/faultday-local-redis")
        foreign = copy.deepcopy(ours)
        foreign["Config"]["Labels"] = {"team": "search"}
        engine.containers[ours["Id"]] = foreign

    r = _recover(tmp_path)
    assert r.returncode != 0
    out = " ".join(r.stdout.split())
    assert f"FAILED to clean up docker_stack {PART_OF}" in out
    assert f"container faultday-local-redis: not labelled {PART_OF_LABEL}={PART_OF}" in out
    assert "removed network faultday-local" in out  # named among what was done
    assert [c["Name"] for c in engine.containers.values()] == ["/faultday-local-redis"]
    assert engine.networks == {}
    assert len(Ledger.in_dir(tmp_path).outstanding_cleanups()) == 1
