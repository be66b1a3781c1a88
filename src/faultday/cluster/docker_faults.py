"""Docker-native faults: act on a component's container through the Engine API.

``container_kill`` (SIGKILL; the restart policy, or the revert, brings it back),
``container_pause`` (the cgroup freezer: the analogue of a hung GPU),
``container_restart`` and ``network_disconnect`` (the revert reconnects with
the same aliases). Each records the container's *ID* and the engine's address
before it acts, so ``faultday recover`` can undo it after a killed harness and
never touches another container that took the same name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from faultday.cluster.config import DockerAccess
from faultday.cluster.docker import DockerStack
from faultday.core.targets import Revert, Target
from faultday.errors import InjectionError, StackError
from faultday.injectors.base import FaultContext, Injector, NoParams, RevertData

log = logging.getLogger(__name__)

_POLL = 0.25  # seconds between looks at a container's state


DOCKER = frozenset({DockerStack.driver})


class ContainerData(RevertData):
    """The container a fault acts on, and how to reach its engine after a crash."""

    container: str
    id: str
    access: DockerAccess
    timeout: float = 60.0  # seconds to wait for the container to run (and be healthy) again


class NetworkData(ContainerData):
    network: str
    aliases: list[str] = Field(default_factory=list)


class KillParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str = Field(default="SIGKILL", pattern=r"^SIG(KILL|TERM|INT|QUIT|ABRT|SEGV)$")
    restart_timeout: float = Field(default=60.0, gt=0, description="seconds to wait for ready")


def _docker_stack(ctx: FaultContext, target: Target) -> Any:

    stack = ctx.stack
    if not isinstance(stack, DockerStack):
        raise InjectionError(f"{target.name}: container faults need --driver docker")
    return stack


def _container_data(ctx: FaultContext, target: Target, *, timeout: float = 60.0) -> ContainerData:
    stack = _docker_stack(ctx, target)
    c = stack.container(target.name)
    access = stack.config.access()
    return ContainerData(container=c.name, id=c.id, access=access, timeout=timeout)


def _get(client: Any, d: ContainerData) -> Any | None:
    """The recorded container by ID, or None when it is gone (nothing left to undo)."""
    # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
    import docker  # type: ignore[import-untyped]  # noqa: PLC0415

    try:
        return client.containers.get(d.id)
    except docker.errors.NotFound:
        log.info("container %s (%s) is gone; nothing to undo", d.container, d.id[:12])
        return None


def _engine_call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
    import docker  # noqa: PLC0415

    # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
    import requests  # noqa: PLC0415

    try:
        return fn(*args, **kwargs)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise InjectionError(f"docker: {what}: {exc}") from exc


def _client(d: ContainerData) -> Any:
    try:
        return d.access.client()
    except StackError as exc:
        raise InjectionError(str(exc)) from exc


def _await_running(c: Any, *, timeout: float, answers: Callable[[], bool] | None = None) -> None:
    """Until the container runs and (where it has a healthcheck) is healthy; bounded.

    ``answers``: the live stack's own probe, which says so before Docker's next check.
    """
    deadline = time.monotonic() + timeout
    while True:
        c.reload()
        state = c.attrs.get("State", {})
        health = (state.get("Health") or {}).get("Status")
        running = state.get("Running") and not state.get("Paused")
        if running and (health in (None, "healthy") or (answers is not None and answers())):
            return
        if time.monotonic() >= deadline:
            raise InjectionError(f"{c.name} not running and healthy within {timeout:.0f}s")
        time.sleep(_POLL)


def _ensure_running(d: ContainerData, *, answers: Callable[[], bool] | None = None) -> None:
    client = _client(d)
    try:
        c = _get(client, d)
        if c is None:
            return
        c.reload()
        state = c.attrs.get("State", {})
        if state.get("Paused"):
            _engine_call("unpause", c.unpause)
        elif not state.get("Running") and not state.get("Restarting"):
            _engine_call("start", c.start)
        _await_running(c, timeout=d.timeout, answers=answers)
    finally:
        client.close()


class _RunningAgain(Injector[KillParams, ContainerData]):
    """A fault after which the container must run again: the revert starts it if it is not."""

    drivers = DOCKER

    Params = KillParams
    Data = ContainerData

    def prepare(
        self, ctx: FaultContext, target: Target, params: KillParams, *, fault: str
    ) -> Revert:
        data = _container_data(ctx, target, timeout=params.restart_timeout)
        return self.record(target, fault=fault, action="start", data=data)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        stack = ctx.stack if ctx.live else None  # recover has none: Docker's health decides
        if isinstance(stack, DockerStack):
            name = revert.target
            _ensure_running(self.data(revert), answers=lambda: stack.answers(name))
        else:
            _ensure_running(self.data(revert))


class ContainerKill(_RunningAgain):
    """Send a signal (SIGKILL) to a component's container; it runs again at window end."""

    name: ClassVar[str] = "container_kill"
    summary: ClassVar[str] = "SIGKILL a component's container (docker); running again by the end"

    def inject(self, ctx: FaultContext, target: Target, params: KillParams, revert: Revert) -> None:
        d = self.data(revert)
        c = _docker_stack(ctx, target).container(target.name)
        if c.id != d.id:
            raise InjectionError(f"{target.name}: container {d.id[:12]} was replaced")
        _engine_call("kill", c.kill, signal=params.signal)
        log.info("sent %s to container %s", params.signal, d.container)


class ContainerPause(Injector[NoParams, ContainerData]):
    """Freeze a component's container (cgroup freezer) for the window; unpause after."""

    drivers = DOCKER

    name: ClassVar[str] = "container_pause"
    summary: ClassVar[str] = "freeze a component's container (docker pause), then unpause"
    Params = NoParams
    Data = ContainerData

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        return self.record(target, fault=fault, action="unpause", data=_container_data(ctx, target))

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        c = _docker_stack(ctx, target).container(target.name)
        _engine_call("pause", c.pause)
        log.info("paused container %s", c.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        client = _client(d)
        try:
            c = _get(client, d)
            if c is not None and c.attrs.get("State", {}).get("Paused"):
                _engine_call("unpause", c.unpause)
                log.info("unpaused container %s", d.container)
        finally:
            client.close()


class ContainerRestart(_RunningAgain):
    """``docker restart`` a component's container (SIGTERM, then SIGKILL after 10 s)."""

    name: ClassVar[str] = "container_restart"
    summary: ClassVar[str] = "restart a component's container (docker restart)"

    def inject(self, ctx: FaultContext, target: Target, params: KillParams, revert: Revert) -> None:
        c = _docker_stack(ctx, target).container(target.name)
        _engine_call("restart", c.restart, timeout=10)
        log.info("restarted container %s", c.name)


class NetworkDisconnect(Injector[NoParams, NetworkData]):
    """Take a component's container off the stack's network; reconnect with its aliases."""

    drivers = DOCKER

    name: ClassVar[str] = "network_disconnect"
    summary: ClassVar[str] = "disconnect a container from the stack network; reconnect after"
    Params = NoParams
    Data = NetworkData

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        stack = _docker_stack(ctx, target)
        base = _container_data(ctx, target)
        c = stack.container(target.name)
        endpoint = c.attrs["NetworkSettings"]["Networks"].get(stack.network) or {}
        # The engine adds the short ID as an alias itself; record only the names given.
        aliases = [a for a in endpoint.get("Aliases") or [] if not c.id.startswith(a)]
        data = NetworkData(**base.model_dump(), network=stack.network, aliases=aliases)
        return self.record(target, fault=fault, action="reconnect", data=data)

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        d = self.data(revert)
        client = _client(d)
        try:
            net = _engine_call("network", client.networks.get, d.network)
            _engine_call("disconnect", net.disconnect, d.id, force=True)
        finally:
            client.close()
        log.info("disconnected %s from %s", d.container, d.network)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        client = _client(d)
        try:
            c = _get(client, d)
            if c is None or d.network in c.attrs["NetworkSettings"]["Networks"]:
                return
            net = _engine_call("network", client.networks.get, d.network)
            _engine_call("connect", net.connect, d.id, aliases=d.aliases)
            log.info("reconnected %s to %s as %s", d.container, d.network, d.aliases)
        finally:
            client.close()
