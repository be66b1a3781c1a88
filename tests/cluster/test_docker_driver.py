"""The Docker driver through the real docker SDK. No Docker daemon can run here; Engine
API stand-in (docker_standin.py): the tests assert the calls, their order and bodies."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from docker_standin import DockerStandIn

from faultday.cluster.docker import DockerConfig, DockerStack
from faultday.core.ledger import Ledger
from faultday.core.profile import StackProfile
from faultday.core.targets import TargetKind
from faultday.errors import StackError


@pytest.fixture
def engine() -> Iterator[DockerStandIn]:
    s = DockerStandIn().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def dstack(engine: DockerStandIn, profile: StackProfile, tmp_path: Path) -> DockerStack:
    # The stand-in plays the official images (pulls, Toxiproxy); faultday's own image
    # runs on the real engine in tests/docker.
    cfg = DockerConfig(base_url=engine.url, timeout=5, ready_timeout=5, images="official")
    return DockerStack(profile, run_dir=tmp_path, ledger=Ledger.in_dir(tmp_path), config=cfg)


def test_up_pulls_creates_and_starts_in_dependency_order(
    dstack: DockerStack, engine: DockerStandIn, tmp_path: Path
) -> None:
    """No Docker daemon can run here; Engine API stand-in."""
    engine.images.add("redis:7.4")  # present: no pull for it
    dstack.up()
    creates = [c for c in engine.call_list() if c.path == "/containers/create"]
    names = [c.query["name"] for c in creates if c.body["Image"] in engine.images]
    order = dstack.start_order()
    assert order.index("proxy") < order.index("agent") and order[-1] == "agent"
    assert list(dict.fromkeys(names)) == [f"faultday-local-{s}" for s in order]
    pulls = [c.query["fromImage"] for c in engine.call_list() if c.path == "/images/create"]
    assert "redis" not in pulls and "qdrant/qdrant" in pulls
    calls = engine.calls()
    assert calls.index("POST /networks/create") < calls.index("POST /containers/create")
    redis = next(c.body for c in creates if c.query["name"] == "faultday-local-redis")
    assert redis["Labels"]["app.kubernetes.io/part-of"] == "faultday-local"
    # On loopback only, on a port chosen once (a restart must not move the component).
    (binding,) = redis["HostConfig"]["PortBindings"]["6379/tcp"]
    assert binding["HostIp"] == "127.0.0.1" and int(binding["HostPort"]) > 0
    assert redis["Healthcheck"]["Test"] == ["CMD", "redis-cli", "ping"]
    assert redis["NetworkingConfig"]["EndpointsConfig"]["faultday-local"]["Aliases"] == ["redis"]
    llm = next(c.body for c in creates if c.query["name"] == "faultday-local-llm-primary")
    assert llm["HostConfig"]["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    proxy = next(c.body for c in creates if c.query["name"] == "faultday-local-proxy")
    assert proxy["HostConfig"]["Binds"] == [
        f"{(tmp_path / 'docker' / 'toxiproxy.json').resolve()}:/config/toxiproxy.json:ro"
    ]
    assert (tmp_path / "docker" / "compose.yaml").is_file()

    eps = dstack.endpoints()
    assert eps["redis"].startswith("redis://127.0.0.1:400")
    edge = dstack.target("agent->qdrant")
    assert edge.kind == TargetKind.EDGE and edge.proxy_name == "agent_to_qdrant"
    assert edge.proxy_api == eps["proxy"] and edge.upstream == "qdrant:6333"
    assert {c.health for c in dstack.describe().components} == {"ready", "running"}

    n = len(engine.calls())
    dstack.pause("tools")
    dstack.resume("tools")
    dstack.restart("agent", timeout=5)
    assert [c for c in engine.calls()[n:] if c.startswith("POST")] == [
        f"POST /containers/{dstack._containers['tools'].id}/pause",
        f"POST /containers/{dstack._containers['tools'].id}/unpause",
        f"POST /containers/{dstack._containers['agent'].id}/restart",
    ]

    dstack.down()
    assert engine.containers == {} and engine.networks == {}
    deletes = [c for c in engine.calls() if c.startswith("DELETE")]
    assert deletes[-1].startswith("DELETE /networks/")


def test_up_failure_removes_what_was_started(dstack: DockerStandIn, engine: DockerStandIn) -> None:
    """No Docker daemon can run here; Engine API stand-in. A container that exits fails up."""
    orig = engine._container

    def exiting(method: str, cid: str, action: str | None):  # type: ignore[no-untyped-def]
        code, out = orig(method, cid, action)
        c = engine.containers.get(cid)
        if c and action == "start" and c["Name"].endswith("-qdrant"):
            c["State"] = {"Status": "exited", "Running": False, "ExitCode": 1}
        return code, out

    engine._container = exiting  # type: ignore[method-assign]
    assert isinstance(dstack, DockerStack)
    with pytest.raises(StackError, match="qdrant exited"):
        dstack.up()
    assert engine.containers == {} and engine.networks == {}
