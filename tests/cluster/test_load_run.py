"""The scenario's load as Kubernetes Jobs during `faultday run --driver kubernetes`.

No cluster can run here, so the Kubernetes API is a stand-in (kube_standin.py). It is
honest about Jobs: each pod of an applied Job runs its locust command as a LOCAL PROCESS
(real Locust, 127.0.0.1, the ConfigMap's data in a folder standing in for /config), so
requests from the "pods" reach a real HTTP target and stream into the run's event sink.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from kube_standin import KubeStandIn
from typer.testing import CliRunner

from conftest import NS, PART_OF, REPO, k8s_config
from faultday.cluster.config import DeployMode, LoadJobsConfig
from faultday.cluster.kubernetes import KubernetesStack
from faultday.cluster.load_jobs import (
    RUN_LABEL,
    advertised_sink,
    is_loopback,
    render_load_jobs,
    run_id,
)
from faultday.core.journal import Journal, RunVerdict
from faultday.core.ledger import Ledger
from faultday.core.loadconfig import LoadConfig, Shape, ShapeSpec, Workload
from faultday.core.profile import load_profile
from faultday.engine.participants import ScenarioLoad, participants_for
from faultday.engine.recover import find_ledgers
from faultday.engine.runner import Run, RunOptions
from faultday.engine.stacks import default_stack_factory
from faultday.errors import StackError
from faultday.load.runner import LoadOptions
from faultday.load.sink import EventSink
from faultday.observe.scrape import MetricsScraper
from faultday.scenario.loader import load_scenario

OKSERVER = REPO / "tests" / "load" / "data" / "okserver.py"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ok_server(tmp_path: Path) -> Iterator[str]:
    """The load's real target: 200 on every GET."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(OKSERVER), str(port), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "okserver did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(5)


def _config(tmp_path: Path, standin: KubeStandIn, target: str, **load: object) -> Path:
    cfg = {
        "apiVersion": "faultday/v1",
        "kind": "KubernetesTarget",
        "spec": {
            "namespace": NS,
            "ready_timeout": "5s",
            "access": {"host": standin.url, "request_timeout": 5},
            "endpoint_overrides": {"agent": target},
            "load": {"endpoints": {"agent": target}, "finish_timeout": "20s", **load},
        },
    }
    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _scenario(tmp_path: Path, *, duration: str, faults: str = "", workers: int = 2) -> Path:
    path = tmp_path / "k8s-load.scenario.yaml"
    path.write_text(
        "apiVersion: faultday/v1\n"
        "kind: Scenario\n"
        "metadata: {name: k8s-load}\n"
        "spec:\n"
        "  stack: local\n"
        f"  duration: {duration}\n"
        "  warmup: 3s\n"
        "  load: {workload: http, users: 4, spawn_rate: 50, "
        f"workers: {workers}, sample_interval: 500ms}}\n" + faults
    )
    return path


def _run(scenario: Path, config: Path, tmp_path: Path) -> tuple[Run, Journal]:
    loaded = load_scenario(scenario)
    parts = [p for p in participants_for(loaded.scenario) if not isinstance(p, MetricsScraper)]
    run = Run(
        loaded,
        RunOptions(
            base_dir=REPO,
            run_dir=tmp_path / "run",
            participants=parts,
            driver="kubernetes",
            driver_config=config,
        ),
    )
    return run, run.execute(default_stack_factory)


def _load_calls(standin: KubeStandIn) -> list[str]:
    return [c for c in standin.calls(mutating=True) if "faultday-load-" in c]


def _load_records(run_dir: Path) -> list[dict[str, object]]:
    """The load's cleanup records and their ``cleanup_done`` (the stack has its own)."""
    ids: set[object] = set()
    out: list[dict[str, object]] = []
    for r in Ledger.in_dir(run_dir).records():
        rec = r.get("cleanup")
        if r["op"] == "cleanup" and isinstance(rec, dict) and rec["injector"] == "k8s_load":
            ids.add(rec["id"])
            out.append(r)
        elif r["op"] == "cleanup_done" and r["id"] in ids:
            out.append(r)
    return out


def _cleanup_ops(run_dir: Path) -> list[str]:
    return [str(r["op"]) for r in _load_records(run_dir)]


def _kinds(calls: list[str]) -> list[str]:
    return [f"{c.split()[0]} {c.rsplit('/', 2)[1]}/{c.rsplit('-', 1)[1]}" for c in calls]


def test_requests_from_job_pods_land_in_the_run_time_series(
    standin: KubeStandIn, ok_server: str, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in whose Job pods are real local Locust processes."""
    # What the run's ledger held when the first load object reached the API.
    at_first_apply: list[list[str]] = []

    def look(_body: object) -> bool:
        at_first_apply.append(_cleanup_ops(tmp_path / "run"))
        return False  # only looks; the apply goes through

    standin.fail("PATCH", rf"/api/v1/namespaces/{NS}/configmaps/faultday-load-.*", when=look)
    config = _config(tmp_path, standin, ok_server)
    run, journal = _run(_scenario(tmp_path, duration="4s"), config, tmp_path)
    assert journal.verdict == RunVerdict.PASSED, (journal.reason, journal.errors)

    # Master + 2 workers ran as "pods", and ended by themselves (exit 0), not by deletion.
    runs = standin.pod_runs()
    assert sorted((r.job.rsplit("-", 1)[1], r.index) for r in runs) == [
        ("master", 0),
        ("workers", 0),
        ("workers", 1),
    ]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.log.read_text()[-500:] for r in runs]

    # Every request the pods made reached the run's observations through the event sink.
    load = next(p for p in run.participants if isinstance(p, ScenarioLoad))
    assert load.delegate is not None and load.procs == []  # nothing ran beside the harness
    reqs = run.observations.requests
    assert len(reqs) > 20 and all(r.ok and r.name == "GET /health" for r in reqs)
    assert load.stats.connections == 2 and load.stats.events == len(reqs)
    assert max(r.t for r in reqs) < 4.0 + 1.0
    rows = (run.run_dir / "timeseries.csv").read_text()
    assert "load_rps" in rows

    # The API calls, in order: stack up, load objects, Job status reads, load deleted, stack down.
    rid = run_id(run.run_dir.name)
    load_calls = _load_calls(standin)
    assert _kinds(load_calls) == [
        "PATCH configmaps/config",
        "PATCH services/master",
        "PATCH jobs/master",
        "PATCH jobs/workers",
        "DELETE jobs/workers",
        "DELETE jobs/master",
        "DELETE services/master",
        "DELETE configmaps/config",
    ]
    assert all(f"/namespaces/{NS}/" in c and f"faultday-load-{rid}-" in c for c in load_calls)
    calls = standin.calls()
    first_load = calls.index(load_calls[0])
    last_load = calls.index(load_calls[-1])
    deploy_applies = [
        i for i, c in enumerate(calls) if c.startswith("PATCH") and "/deployments/" in c
    ]
    deploy_deletes = [
        i for i, c in enumerate(calls) if c.startswith("DELETE") and "/deployments/" in c
    ]
    assert max(deploy_applies) < first_load and last_load < min(deploy_deletes)
    status_reads = [c for c in calls[first_load:last_load] if c.startswith("GET") and "/jobs/" in c]
    assert status_reads, "the Jobs' status was read before they were deleted"

    # Every load object was labelled as the stack's, and nothing of the load is left.
    with standin.lock:
        applied = [c.body for c in standin.state.calls if c.method == "PATCH" and "load" in c.path]
    assert {b["metadata"]["labels"]["app.kubernetes.io/part-of"] for b in applied} == {PART_OF}
    assert {b["metadata"]["labels"][RUN_LABEL] for b in applied} == {rid}
    assert standin.objects("jobs", NS) == {}
    assert not [n for n in standin.objects("configmaps", NS) if n.startswith("faultday-load")]

    # Record, then act: the cleanup record was on disk before the first apply; it is done.
    assert at_first_apply == [["cleanup"]]
    assert _cleanup_ops(run.run_dir) == ["cleanup", "cleanup_done"]
    assert Ledger.in_dir(run.run_dir).outstanding_cleanups() == []
    (rec,) = [r for r in _load_records(run.run_dir) if r["op"] == "cleanup"]
    assert isinstance(rec["cleanup"], dict) and isinstance(rec["cleanup"]["data"], dict)
    data = rec["cleanup"]["data"]
    assert data["run"] == rid and data["namespace"] == NS
    assert data["guard"] == {"namespaces": [NS], "part_of": PART_OF}
    assert [o[2].rsplit("-", 1)[1] for o in data["objects"]] == [  # type: ignore[index,union-attr]
        "workers",
        "master",
        "master",
        "config",
    ]

    events = {e.kind: e for e in journal.events}
    assert events["load.started"].data["workers"] == 2
    jobs = events["load.stopped"].data["jobs"]
    assert isinstance(jobs, dict) and all(str(v).startswith("Complete") for v in jobs.values())


def test_a_run_that_fails_halfway_deletes_the_load_jobs_at_once(
    standin: KubeStandIn, ok_server: str, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. A fault fails 1 s in; the run errors; the load
    Jobs are deleted right away (their pods killed), before the stack comes down."""
    standin.fail("DELETE", rf"/api/v1/namespaces/{NS}/pods/.*")
    faults = (
        "  faults:\n"
        "    - {name: kill, inject: pod_delete, target: tools, at: 1s, with: {count: 1}}\n"
    )
    config = _config(tmp_path, standin, ok_server)
    began = time.monotonic()
    _, journal = _run(_scenario(tmp_path, duration="60s", faults=faults), config, tmp_path)
    assert time.monotonic() - began < 30  # not the 60 s of the scenario, nor a Job timeout
    assert journal.verdict == RunVerdict.ERROR and "kill" in journal.reason
    assert _kinds(_load_calls(standin))[-4:] == [
        "DELETE jobs/workers",
        "DELETE jobs/master",
        "DELETE services/master",
        "DELETE configmaps/config",
    ]
    calls = standin.calls()
    last_load = calls.index(_load_calls(standin)[-1])
    assert last_load < min(i for i, c in enumerate(calls) if c.startswith("DELETE /apis/apps"))
    runs = standin.pod_runs()
    assert len(runs) == 3 and all(r.returncode is not None for r in runs)
    assert standin.objects("jobs", NS) == {}
    assert "load.jobs_cancelled" in {e.kind for e in journal.events}
    assert Ledger.in_dir(tmp_path / "run").outstanding_cleanups() == []


def test_a_load_that_cannot_start_deletes_what_it_applied(
    standin: KubeStandIn, ok_server: str, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. The workers Job's apply fails: it and the
    ConfigMap, Service and master Job already applied are deleted (newest first; a failed
    apply may still have taken effect, and a 404 is fine), the run errors."""
    standin.fail("PATCH", rf"/apis/batch/v1/namespaces/{NS}/jobs/faultday-load-.*-workers")
    config = _config(tmp_path, standin, ok_server)
    run, journal = _run(_scenario(tmp_path, duration="4s"), config, tmp_path)
    assert journal.verdict == RunVerdict.ERROR
    assert "could not start the load Jobs" in journal.reason and "500" in journal.reason
    assert _kinds(_load_calls(standin)) == [
        "PATCH configmaps/config",
        "PATCH services/master",
        "PATCH jobs/master",
        "PATCH jobs/workers",
        "DELETE jobs/workers",
        "DELETE jobs/master",
        "DELETE services/master",
        "DELETE configmaps/config",
    ]
    assert standin.objects("jobs", NS) == {}
    assert all(r.returncode is not None for r in standin.pod_runs())
    # The stack still came down after the failed start; the cleanup record is done.
    assert standin.objects("deployments", NS) == {}
    assert _cleanup_ops(run.run_dir) == ["cleanup", "cleanup_done"]
    assert Ledger.in_dir(run.run_dir).outstanding_cleanups() == []


def test_dry_run_lists_the_load_objects(
    standin: KubeStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`faultday run --dry-run --driver kubernetes` names the load objects; the API stand-in
    (no cluster can run here) proves that no call is made."""
    from faultday.cli import app

    monkeypatch.chdir(REPO)
    config = _config(
        tmp_path, standin, "http://x", sink_bind="0.0.0.0", sink_advertise="10.0.0.9:7070"
    )
    res = CliRunner().invoke(
        app,
        [
            "run",
            "--dry-run",
            "--driver",
            "kubernetes",
            "--driver-config",
            str(config),
            str(_scenario(tmp_path, duration="4s", workers=3)),
        ],
        env={"COLUMNS": "250"},
    )
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "faultday-load-<id>" in ln]
    assert [ln.split()[:2] for ln in lines] == [
        ["apply", "ConfigMap"],
        ["apply", "Service"],
        ["apply", "Job"],
        ["apply", "Job"],
        ["delete", "Job"],
        ["delete", "Job"],
        ["delete", "Service"],
        ["delete", "ConfigMap"],
    ]
    assert "events to 10.0.0.9:7070" in lines[0] and "3 worker pods" in lines[3]
    out = res.output
    assert out.index("apply          Deployment") < out.index(lines[0])
    assert out.index(lines[-1]) < out.index("delete         Deployment")
    assert standin.calls() == []


def test_sink_address_settings() -> None:
    cfg = LoadJobsConfig()
    assert advertised_sink(cfg, 4242) == "127.0.0.1:4242" and is_loopback("127.0.0.1:4242")
    cfg = LoadJobsConfig(sink_bind="0.0.0.0", sink_advertise="172.18.0.1")
    assert advertised_sink(cfg, 4242) == "172.18.0.1:4242" and not is_loopback("172.18.0.1:1")
    cfg = LoadJobsConfig(sink_advertise="faultday-sink.gameday.svc:7000")
    assert advertised_sink(cfg, 4242) == "faultday-sink.gameday.svc:7000"
    assert advertised_sink(LoadJobsConfig(sink_advertise="fd00::5"), 1) == "[fd00::5]:1"
    # The sink listens where it is told (a fixed port here; pods would need a routable host).
    port = _free_port()
    sink = EventSink(lambda _r: None, lambda _w: 0.0, host="127.0.0.1", port=port)
    try:
        assert sink.port == port and sink.address == f"127.0.0.1:{port}"
    finally:
        sink.stop()


def test_a_sink_the_pods_cannot_reach_fails_the_run_with_a_hint(
    standin: KubeStandIn, ok_server: str, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. The pods are told a sink address where nothing
    listens: no request is recorded, and the run says why instead of passing empty."""
    config = _config(tmp_path, standin, ok_server, sink_advertise=f"127.0.0.1:{_free_port()}")
    _, journal = _run(_scenario(tmp_path, duration="3s", workers=1), config, tmp_path)
    assert journal.verdict == RunVerdict.ERROR
    assert any("no load pod connected to the event socket" in e for e in journal.errors)
    assert any("load.sink_advertise" in e for e in journal.errors)
    assert standin.objects("jobs", NS) == {}
    assert Ledger.in_dir(tmp_path / "run").outstanding_cleanups() == []


def test_down_deletes_load_objects_the_load_left_and_harness_placement_runs_locally(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in. The stack's down is the last safety net, in
    attach mode too (where it deletes nothing of the stack)."""
    standin.state.run_jobs = False
    profile = load_profile("local", base_dir=REPO)
    deploy = KubernetesStack(
        profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=k8s_config(standin)
    )
    deploy.up()  # the user's own stack, for the attach run below
    attach = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, mode=DeployMode.ATTACH),
    )
    base = LoadConfig(
        workload=Workload.HTTP,
        shape=ShapeSpec(kind=Shape.CONSTANT, users=1, spawn_rate=1),
        sink="127.0.0.1:1",
        base_urls=attach.load_endpoints(),
        t0_wall=0.0,
        duration=1.0,
    )
    assert base.base_urls["agent"] == f"http://agent.{NS}.svc.cluster.local:8080"
    docs = render_load_jobs(base, workers=1, namespace=NS, part_of=PART_OF, run="abc")
    told: list[str] = []
    attach.track_load(docs, on_deleted=lambda: told.append("deleted"))
    for d in docs[:3]:  # as if the load died after three applies and never cleaned up
        attach.cluster.apply(d)
    # A delete that fails: down says so, and does not tell the load its objects are gone.
    standin.fail("DELETE", rf"/apis/batch/v1/namespaces/{NS}/jobs/faultday-load-workers")
    with pytest.raises(StackError, match="teardown incomplete"):
        attach.down()
    assert told == []
    n = len(standin.calls())
    attach.down()
    assert told == ["deleted"]
    assert [c.split("/")[-2] for c in standin.calls(mutating=True)[-4:]] == [
        "jobs",
        "jobs",
        "services",
        "configmaps",
    ]
    assert len(standin.calls()) - n == 4
    assert standin.objects("jobs", NS) == {}
    assert len(standin.objects("deployments", NS)) == 8  # the attached stack is untouched
    attach.down()  # nothing left to delete: no call, nobody told twice
    assert len(standin.calls()) - n == 4 and told == ["deleted"]

    # placement: harness leaves the load to local Locust processes.
    local = KubernetesStack(
        profile,
        run_dir=tmp_path,
        ledger=Ledger.in_dir(tmp_path),
        config=k8s_config(standin, load={"placement": "harness"}),
    )
    sc = load_scenario(_scenario(tmp_path, duration="4s")).scenario
    assert local.load_participant(sc.spec.load, LoadOptions()) is None
    assert attach.load_participant(sc.spec.load, LoadOptions()) is not None


def _recover(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``faultday recover`` command, in its own process (like a user after a crash)."""
    return subprocess.run(
        [sys.executable, "-m", "faultday.cli", "recover", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"},
    )


def _until(pred: Callable[[], object], timeout: float, what: str) -> object:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := pred():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_recover_after_sigkill_deletes_the_load_objects(
    standin: KubeStandIn, ok_server: str, tmp_path: Path
) -> None:
    """No cluster can run here; API stand-in (its Job pods are local Locust processes). The
    harness is SIGKILLed while the load Jobs run; `faultday recover <run_dir>` deletes them
    from the record in the run's ledger, and a second recover finds nothing outstanding."""
    config = _config(tmp_path, standin, ok_server)
    report = tmp_path / "r"
    harness = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultday.cli",
            "run",
            str(_scenario(tmp_path, duration="60s")),
            "--driver",
            "kubernetes",
            "--driver-config",
            str(config),
            "--report-dir",
            str(report),
            "--no-progress",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(
            lambda: len([r for r in standin.pod_runs() if r.returncode is None]) == 3,
            60,
            "the load pods to run",
        )
        harness.send_signal(signal.SIGKILL)
        assert harness.wait(10) == -signal.SIGKILL
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
    (run_dir,) = [d for d in report.iterdir() if d.is_dir()]
    rid = run_id(run_dir.name)
    names = [f"faultday-load-{rid}-{x}" for x in ("workers", "master", "master", "config")]
    # Nobody cleaned up: the load objects and their pods are still there.
    assert set(standin.objects("jobs", NS)) == {names[0], names[1]}
    assert names[2] in standin.objects("services", NS)
    assert names[3] in standin.objects("configmaps", NS)
    assert find_ledgers(report) == [run_dir]  # an outstanding cleanup counts

    n = len(standin.calls())
    r = _recover(str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"cleaned up k8s_load {NS}/faultday-load-{rid} (delete_load_objects)" in r.stdout
    for kind, name in zip(("Job", "Job", "Service", "ConfigMap"), names, strict=True):
        assert f"deleted {kind} {NS}/{name}" in r.stdout
    # Each object read (guard: stack label and this run's label), then deleted, newest first.
    assert _kinds(_load_calls(standin)[-4:]) == [
        "DELETE jobs/workers",
        "DELETE jobs/master",
        "DELETE services/master",
        "DELETE configmaps/config",
    ]
    recover_calls = standin.calls()[n:]
    load_part = [c for c in recover_calls if "faultday-load-" in c]
    assert [c.split()[0] for c in load_part] == ["GET", "DELETE"] * 4
    # The load's record is newer than the stack's: its objects go first, then the stack's.
    last_load = recover_calls.index(load_part[-1])
    assert all("faultday-load-" not in c for c in recover_calls[last_load + 1 :])
    assert "deleted Deployment" in r.stdout and standin.objects("deployments", NS) == {}
    assert standin.objects("jobs", NS) == {}
    assert not [x for x in standin.objects("services", NS) if x.startswith("faultday-load")]
    assert not [x for x in standin.objects("configmaps", NS) if x.startswith("faultday-load")]
    assert all(r.returncode is not None for r in standin.pod_runs())  # deleting the Jobs
    assert Ledger.in_dir(run_dir).outstanding_cleanups() == []
    assert find_ledgers(report) == []

    n = len(standin.calls())
    again = _recover(str(run_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().endswith("nothing outstanding")
    assert len(standin.calls()) == n
