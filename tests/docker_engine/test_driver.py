"""The docker driver, its faults and the compose rendering on a real Docker Engine.

One stack (the local profile, every component from faultday's image) comes up
for the module; the faults act on it and must leave it healthy; the module ends
with ``down`` and asserts that nothing of the stack is left.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from faultday.cluster.config import NAME_LABEL, PART_OF_LABEL, STACK_RUN_LABEL
from faultday.cluster.docker import HEALTH_INTERVAL_S, DockerStack
from faultday.cluster.docker_faults import (
    ContainerKill,
    ContainerPause,
    ContainerRestart,
    NetworkDisconnect,
)
from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.core.targets import Revert, Target
from faultday.injectors.base import Injector

pytestmark = pytest.mark.docker
PART_OF = "faultday-local"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Ctx:
    """The engine's FaultContext during a live run."""

    run_dir: Path
    stack: DockerStack
    live: bool = True

    def target(self, name: str) -> Target:
        return self.stack.target(name)

    def restart(self, component: str, *, timeout: float) -> None:
        self.stack.restart(component, timeout=timeout)


@pytest.fixture(scope="module")
def stack(
    engine: Any, nothing_left: Callable[[str], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DockerStack]:
    run_dir = tmp_path_factory.mktemp("docker-stack")
    profile = load_profile("local", base_dir=REPO)
    s = DockerStack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
    t0 = time.monotonic()
    s.up(timeout=300)
    print(f"docker stack up in {time.monotonic() - t0:.1f}s")
    try:
        yield s
    finally:
        t0 = time.monotonic()
        s.down()
        print(f"docker stack down in {time.monotonic() - t0:.1f}s")
        assert nothing_left(f"{PART_OF_LABEL}={PART_OF}") == []
        assert Ledger.in_dir(run_dir).outstanding_cleanups() == []


def _healthy(s: DockerStack) -> dict[str, str]:
    return {c.name: c.health for c in s.describe().components}


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _inject(injector: Injector[Any, Any], ctx: Ctx, target: str, raw: dict[str, Any]) -> Revert:
    """What the engine does: prepare → ledger (fsynced) → inject."""
    params = injector.parse(raw)
    t = ctx.target(target)
    revert = injector.prepare(ctx, t, params, fault="f1")
    Ledger.in_dir(ctx.run_dir).add_revert(revert)
    injector.inject(ctx, t, params, revert)
    return revert


def _revert(injector: Injector[Any, Any], ctx: Ctx, revert: Revert) -> None:
    injector.revert(ctx, revert)
    Ledger.in_dir(ctx.run_dir).revert_done(revert, ok=True)


def test_every_component_runs_labelled_and_published_on_loopback_only(
    stack: DockerStack, engine: Any
) -> None:
    assert set(_healthy(stack).values()) == {"ready"}, _healthy(stack)
    run = stack.ledger.outstanding_cleanups()[0].data["run"]
    for name in stack.profile.spec.components:
        c = engine.containers.get(stack.container_name(name))
        labels = c.labels
        assert labels[PART_OF_LABEL] == PART_OF and labels[NAME_LABEL] == name
        assert labels[STACK_RUN_LABEL] == run
        bindings = [b for v in c.attrs["NetworkSettings"]["Ports"].values() for b in v or []]
        assert bindings and {b["HostIp"] for b in bindings} == {"127.0.0.1"}
        # Docker's own check is slow (each is a `docker exec`); the driver probes readiness.
        assert c.attrs["Config"]["Healthcheck"]["Interval"] == HEALTH_INTERVAL_S * 10**9
    net = engine.networks.get(stack.network)
    assert net.attrs["Labels"][PART_OF_LABEL] == PART_OF
    eps = stack.endpoints()
    assert _answers(eps["agent"]) and _answers(eps["tools"])
    # The agent reaches its dependencies by service name, through the proxy's edges.
    r = httpx.get(f"{eps['proxy']}/proxies", timeout=5)
    assert {p["upstream"] for p in r.json().values()} >= {"qdrant:6333", "redis:6379"}


def test_container_kill_is_undone_and_the_component_answers_again(stack: DockerStack) -> None:
    ctx = Ctx(stack.run_dir, stack)
    before = stack.container("tools").id
    url = stack.endpoints()["tools"]
    revert = _inject(ContainerKill(), ctx, "tools", {"restart_timeout": 120})
    assert revert.data["id"] == before  # recorded before it acted
    time.sleep(0.5)
    _revert(ContainerKill(), ctx, revert)
    assert stack.container("tools").id == before  # the same container, running again
    assert stack.endpoints()["tools"] == url and _answers(url)  # where it answered before


def test_container_pause_freezes_then_unpauses(stack: DockerStack) -> None:
    ctx = Ctx(stack.run_dir, stack)
    url = stack.endpoints()["tools"]
    revert = _inject(ContainerPause(), ctx, "tools", {})
    assert stack.container("tools").attrs["State"]["Paused"] is True
    assert _healthy(stack)["tools"] == "paused"
    assert not _answers(url)  # frozen: the connection opens, nothing answers in time
    _revert(ContainerPause(), ctx, revert)
    _revert(ContainerPause(), ctx, revert)  # idempotent
    assert stack.container("tools").attrs["State"]["Paused"] is False
    assert _answers(url)


def test_container_restart_comes_back_ready(stack: DockerStack) -> None:
    ctx = Ctx(stack.run_dir, stack)
    started = stack.container("llm-canary").attrs["State"]["StartedAt"]
    revert = _inject(ContainerRestart(), ctx, "llm-canary", {})
    _revert(ContainerRestart(), ctx, revert)
    c = stack.container("llm-canary")
    assert c.attrs["State"]["StartedAt"] != started and c.attrs["State"]["Running"]


def test_network_disconnect_cuts_the_edge_and_reconnects_with_the_aliases(
    stack: DockerStack, engine: Any
) -> None:
    ctx = Ctx(stack.run_dir, stack)
    revert = _inject(NetworkDisconnect(), ctx, "qdrant", {})
    assert revert.data["aliases"] == ["qdrant"]
    assert stack.network not in stack.container("qdrant").attrs["NetworkSettings"]["Networks"]
    # From the proxy's container, the name no longer resolves.
    probe = "import socket; socket.create_connection(('qdrant', 6333), 2)"
    proxy = engine.containers.get(stack.container_name("proxy"))
    assert proxy.exec_run(["python", "-c", probe]).exit_code != 0
    _revert(NetworkDisconnect(), ctx, revert)
    endpoint = stack.container("qdrant").attrs["NetworkSettings"]["Networks"][stack.network]
    assert "qdrant" in endpoint["Aliases"]
    assert proxy.exec_run(["python", "-c", probe]).exit_code == 0


def test_a_fault_on_a_container_that_was_replaced_is_refused(stack: DockerStack) -> None:
    """The revert data names the container by ID: a replacement is never touched."""
    ctx = Ctx(stack.run_dir, stack)
    revert = ContainerPause().prepare(
        ctx, ctx.target("redis"), ContainerPause().parse({}), fault="x"
    )
    gone = dataclasses.replace(revert, data={**revert.data, "id": "0" * 64})
    ContainerPause().revert(ctx, gone)  # nothing to undo, no error
    assert not stack.container("redis").attrs["State"]["Paused"]
