"""The Docker driver: a stack profile as containers on a private network (docker SDK).

It runs a compose rendering without needing the compose plugin: each service
becomes one container named ``faultday-<profile>-<service>``, labelled
``app.kubernetes.io/part-of=faultday-<profile>``, reachable by its service name
on the network and published on 127.0.0.1 for the harness. Two renderings:
``images: faultday`` (the default) runs every component from faultday's own image
(``make images``) with the process driver's command lines; ``images: official`` runs
what ``faultday stack render --driver docker`` writes for a GPU host (vLLM, Triton,
Qdrant, Toxiproxy images). Both come from ``faultday.cluster.docker_render``.

Before the network is created, ``up`` writes a ``docker_stack`` cleanup record
(the engine's address, the names, and the ``faultday.dev/stack-run`` label every
container and the network carry) to the run's ledger; a clean ``down`` marks it
done. After a killed harness, ``faultday recover`` removes them from it.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultday.cluster.cleanup import DOCKER_CLEANUP, docker_cleanup_record
from faultday.cluster.config import (
    NAME_LABEL,
    PART_OF_LABEL,
    STACK_RUN_LABEL,
    DockerAccess,
    part_of_value,
)
from faultday.cluster.docker_render import (
    ComposeDoc,
    ComposeProject,
    faultday_image,
    main_port,
    render_compose,
)
from faultday.cluster.official_images import ToxiproxyListener, official_port
from faultday.core.components import ProbeKind
from faultday.core.driverbase import DriverBase
from faultday.core.ledger import Ledger
from faultday.core.plugins import did_you_mean
from faultday.core.profile import StackProfile
from faultday.core.stackinfo import StackInfo
from faultday.core.targets import Revert, Target
from faultday.core.yamlpos import parse_file, validation_problems
from faultday.errors import ScenarioError, StackError
from faultday.stack.supervisor import free_port, probe_once

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
# Components' folders relative to the rendering (<run_dir>/docker): <run_dir>/<component>,
# where the process driver keeps them too.
DATA_ROOT = ".."
PROBE_TIMEOUT_S = 1.0
LOG_LINES = 20000  # per container, saved to <run_dir>/logs/ before down removes it
_NS = 1_000_000_000
# How often the driver's containers run their own healthcheck. Each check is a `docker
# exec` (runc): at the compose file's 1 s, nine containers kept ~0.45 of a 2-core box's
# cores busy for the whole run, slowing the load generator and the stack under test
# alike. Readiness does not wait for it: the driver probes each component itself
# through its published port, as the process driver probes a process.
HEALTH_INTERVAL_S = 10
HEALTH_RETRIES = 30  # unhealthy after ~5 min of failures, as the compose file's 300 x 1 s
# The compose rendering's restart policies as the Engine API takes them. ``always`` has no
# retry cap in Docker: a container that keeps exiting keeps being restarted, with backoff.
_RESTART: dict[str, dict[str, Any]] = {
    "always": {"Name": "always"},
    "on-failure": {"Name": "on-failure", "MaximumRetryCount": 5},
}


class DockerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = Field(default=None, description="engine URL [DOCKER_HOST / socket]")
    api_version: str = Field(default="1.41", description="Engine API version (Docker 20.10+)")
    timeout: float = Field(default=30.0, gt=0, description="seconds per Engine API call")
    ready_timeout: float = Field(default=600.0, gt=0)
    pull: bool = Field(default=True, description="pull images the engine does not have")
    images: Literal["faultday", "official"] = Field(
        default="faultday",
        description="faultday: every component from faultday's image; official: vLLM, Triton…",
    )
    mode: Literal["deploy", "attach"] = Field(
        default="deploy",
        description="attach: run against containers already up (docker-compose up); touch "
        "nothing at up or down",
    )
    project: str | None = Field(
        default=None, description="attach: the compose project name [faultday-<profile>]"
    )
    image: str | None = Field(
        default=None, description="faultday's image tag [$FAULTDAY_IMAGE, faultday/faultday:latest]"
    )

    def access(self) -> DockerAccess:
        """Where the engine is, as ``faultday recover`` will need it (``$DOCKER_HOST`` now)."""
        return DockerAccess(
            base_url=self.base_url,
            docker_host=os.environ.get("DOCKER_HOST") or None,
            api_version=self.api_version,
            timeout=self.timeout,
        )


class DockerTarget(BaseModel):
    """The file ``faultday run --driver docker --driver-config FILE`` reads."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["faultday/v1"] = Field(alias="apiVersion")
    kind: Literal["DockerTarget"]
    spec: DockerConfig = DockerConfig()


def load_docker_config(path: Path) -> DockerConfig:
    """Read a DockerTarget file; ScenarioError with ``file:line:col`` for every problem."""
    doc = parse_file(path)
    try:
        return DockerTarget.model_validate(doc.data).spec
    except ValidationError as exc:
        raise ScenarioError(validation_problems(doc, exc)) from exc


def _seconds(text: str) -> int:
    """Compose durations (``2s``, ``500ms``) as the Engine API's nanoseconds."""
    if text.endswith("ms"):
        return int(float(text[:-2]) * _NS / 1000)
    if text.endswith("s"):
        return int(float(text[:-1]) * _NS)
    return int(float(text) * _NS)


class DockerStack(DriverBase):
    """A stack profile as containers on one engine; the process driver's API."""

    driver = "docker"

    @staticmethod
    def load_config(path: Path) -> DockerConfig:
        """The driver's settings file (``faultday run --driver-config``)."""
        return load_docker_config(path)

    def __init__(
        self,
        profile: StackProfile,
        *,
        run_dir: Path,
        ledger: Ledger,
        policy: str | None = None,
        config: DockerConfig | None = None,
    ) -> None:
        # No trace wiring in containers yet (docs/traces.md): the collector is left out.
        profile = profile.without_collector()
        super().__init__(profile, run_dir=run_dir, ledger=ledger, policy=policy)
        self.config = config or DockerConfig()
        self.part_of = part_of_value(profile.name)
        self.render_dir = run_dir / "docker"
        self._compose, self._proxies = self._render()
        self._edges = {e.name: e for e in profile.edges()} if profile.spec.proxy else {}
        self._client: Any = None
        self._containers: dict[str, Any] = {}
        self._cleanup: Revert | None = None  # outstanding in the ledger until down() is clean
        self._network = ""  # attach: the network the found containers share
        self._host_ports: dict[str, int] = {}

    # -- rendering and the command plan ---------------------------------------------------

    def _render(self) -> tuple[ComposeDoc, list[ToxiproxyListener]]:
        with tempfile.TemporaryDirectory(prefix="faultday-docker-") as tmp:
            project = self._write_rendering(Path(tmp))
        return project.doc, project.proxies

    def _write_rendering(self, out: Path) -> ComposeProject:
        return render_compose(
            self.profile,
            out=out,
            images=self.config.images,
            image=self.config.image,
            data_dir=DATA_ROOT,
        )

    @property
    def network(self) -> str:
        return self._network or f"faultday-{self.profile.name}"

    def container_name(self, service: str) -> str:
        return f"faultday-{self.profile.name}-{service}"

    def port(self, service: str) -> int:
        """The service's main port inside its container."""
        if self.config.images == "faultday":
            return main_port(self.profile, service)
        return official_port(self.profile, service)

    def create_args(self, service: str) -> dict[str, Any]:
        """The ``containers.create`` keyword arguments for one compose service."""
        svc = self._compose["services"][service]
        port = self.port(service)
        args: dict[str, Any] = {
            "image": svc["image"],
            "name": self.container_name(service),
            "labels": {**self._owner_labels(), NAME_LABEL: service},
            "network": self.network,
            "ports": {f"{port}/tcp": (HOST, self._host_port(service))},
            "restart_policy": _RESTART.get(svc.get("restart", ""), _RESTART["on-failure"]),
            "detach": True,
        }
        if "command" in svc:
            args["command"] = list(svc["command"])
        if "environment" in svc:
            args["environment"] = dict(svc["environment"])
        if svc.get("init"):
            args["init"] = True
        if "shm_size" in svc:
            args["shm_size"] = svc["shm_size"]
        vols = {}
        for v in svc.get("volumes", []):
            src, dst, *mode = v.split(":")
            vols[str((self.render_dir / src).resolve())] = {
                "bind": dst,
                "mode": mode[0] if mode else "rw",
            }
        if vols:
            args["volumes"] = vols
        if hc := svc.get("healthcheck"):
            probed = self.config.images == "faultday"  # the driver probes these itself
            args["healthcheck"] = {
                "test": hc["test"],
                "interval": HEALTH_INTERVAL_S * _NS if probed else _seconds(hc["interval"]),
                "timeout": _seconds(hc["timeout"]),
                "retries": HEALTH_RETRIES if probed else hc["retries"],
            }
        deploy = svc.get("deploy")
        devices = deploy["resources"]["reservations"]["devices"] if deploy else []
        if devices:
            # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
            from docker.types import DeviceRequest  # type: ignore[import-untyped]  # noqa: PLC0415

            args["device_requests"] = [
                DeviceRequest(
                    driver=d["driver"], count=d["count"], capabilities=[d["capabilities"]]
                )
                for d in devices
            ]
        return args

    def _host_port(self, service: str) -> int:
        """A free port on 127.0.0.1, chosen once per service: a port the engine picks
        changes at every start, and a restarted component must answer where it did.
        Below the ephemeral range and distinct from the other services' (see free_port)."""
        if service not in self._host_ports:
            self._host_ports[service] = free_port(HOST, exclude=set(self._host_ports.values()))
        return self._host_ports[service]

    def _owner_labels(self) -> dict[str, str]:
        """part-of, and this deploy's stack-run once ``up`` recorded it."""
        out = {PART_OF_LABEL: self.part_of}
        if self._cleanup is not None:
            out[STACK_RUN_LABEL] = str(self._cleanup.data["run"])
        return out

    def start_order(self) -> list[str]:
        services = self._compose["services"]
        return [c for c in self.profile.start_order() if c in services]

    # -- engine plumbing --------------------------------------------------------------------

    def _docker(self) -> Any:
        if self._client is None:
            self._client = self.config.access().client()
        return self._client

    def _errors(self) -> tuple[type[BaseException], ...]:
        # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
        import docker  # type: ignore[import-untyped]  # noqa: PLC0415
        import requests  # noqa: PLC0415

        return (docker.errors.DockerException, requests.RequestException)

    # -- lifecycle -----------------------------------------------------------------------

    def up(self, *, timeout: float | None = None) -> None:
        """Write the rendering, create the network, start services in dependency order."""
        self._write_rendering(self.render_dir)
        deadline = time.monotonic() + (timeout or self.config.ready_timeout)
        if self.config.mode == "attach":
            self.adopt(compose_project=self.config.project or f"faultday-{self.profile.name}")
            for service in self._containers:  # `up -d` returns before they are healthy
                self._wait_ready(service, deadline)
            return
        client = self._docker()
        self._record()
        try:
            client.networks.create(self.network, driver="bridge", labels=self._owner_labels())
            self._start_all(deadline)
        except self._errors() as exc:
            self.down()
            raise StackError(f"docker: {exc}") from exc
        except StackError:
            self.down()
            raise

    def _record(self) -> None:
        """Record, then act: on disk (fsynced) before the network and the first container, so
        ``faultday recover`` removes them after a killed harness."""
        if self._cleanup is not None:  # an earlier up's record stays until down() is clean
            return
        self._cleanup = docker_cleanup_record(
            access=self.config.access(),
            part_of=self.part_of,
            run=secrets.token_hex(4),
            containers=[self.container_name(s) for s in reversed(self.start_order())],
            network=self.network,
        )
        self.ledger.add_cleanup(self._cleanup)

    def _create(self, service: str) -> Any:
        # Optional dependency: the docker SDK (faultday[k8s]), for docker stacks only.
        import docker  # noqa: PLC0415

        client = self._docker()
        args = self.create_args(service)
        # Other services address it by its compose service name.
        args["networking_config"] = {
            self.network: client.api.create_endpoint_config(aliases=[service])
        }
        try:
            return client.containers.create(**args)
        except docker.errors.ImageNotFound as exc:
            if args["image"] == faultday_image(self.config.image):
                # Never pulled: it is built here (docker-build/build-images.sh), not published.
                msg = f"image {args['image']} not found; build it with `make images`"
                raise StackError(msg) from exc
            if not self.config.pull:
                raise
            log.info("pulling %s", args["image"])
            client.images.pull(args["image"])
            return client.containers.create(**args)

    def _start_all(self, deadline: float) -> None:
        """Start each service once what it waits for is ready, many at a time: the stack is
        up in the time of its longest dependency chain, not the sum of all start-ups."""
        pending = self.start_order()
        services = set(pending)
        started: list[str] = []
        ready: set[str] = set()
        while pending or len(ready) < len(started):
            for service in [s for s in pending if self.profile.wait_for(s) & services <= ready]:
                self._containers[service] = self._create(service)
                self._containers[service].start()
                pending.remove(service)
                started.append(service)
            ready |= {s for s in started if s not in ready and self._is_ready(s)}
            if time.monotonic() >= deadline:
                late = sorted(set(started) - ready) or pending
                raise StackError(f"not ready before the deadline: {', '.join(late)}")
            time.sleep(0.25)

    def _is_ready(self, service: str) -> bool:
        c = self._containers[service]
        c.reload()
        state = c.attrs.get("State", {})
        health = (state.get("Health") or {}).get("Status")
        if state.get("Status") in ("exited", "dead"):
            raise StackError(f"{service} exited (code {state.get('ExitCode')})")
        if not state.get("Running") or state.get("Paused"):
            return False
        return health in (None, "healthy") or self.answers(service)

    def answers(self, component: str) -> bool:
        """The component passes its readiness probe from this host, through its published port.

        Docker's own healthcheck runs every ``HEALTH_INTERVAL_S`` on the driver's containers,
        so a component is ready as soon as it answers, not at the next check. HTTP and
        Redis probes only: docker-proxy accepts a TCP connection to a published port even
        before anything in the container listens, so a TCP probe proves nothing there.
        """
        probe = self.profile.probe(component)
        if self.config.images != "faultday" or probe.kind not in (ProbeKind.HTTP, ProbeKind.REDIS):
            return False
        try:
            port = self._published(component, self.port(component))
        except StackError:
            return False
        return probe_once(probe, host=HOST, port=port, timeout=PROBE_TIMEOUT_S)

    def _wait_ready(self, service: str, deadline: float) -> None:
        while not self._is_ready(service):
            if time.monotonic() >= deadline:
                raise StackError(f"{service} not ready before the deadline")
            time.sleep(0.5)

    def adopt(self, *, compose_project: str | None = None) -> None:
        """Take over a stack already running: its containers (by compose project and service
        labels, else by this driver's names) and, when an earlier ``up`` of this run folder
        started it, that up's cleanup record, so ``down`` here completes it."""
        for rec in self.ledger.outstanding_cleanups():
            if rec.injector == DOCKER_CLEANUP:
                self._cleanup = rec
        client = self._docker()
        missing = []
        for service in self.start_order():
            found = []
            if compose_project:
                labels = [f"{_COMPOSE}.project={compose_project}", f"{_COMPOSE}.service={service}"]
                found = client.containers.list(filters={"label": labels})
            if not found:
                exact = f"^/?{self.container_name(service)}$"
                found = client.containers.list(all=True, filters={"name": exact})
            if found:
                self._containers[service] = found[0]
            else:
                missing.append(service)
        if compose_project and missing:
            raise StackError(
                f"attach: no container for {', '.join(missing)} in compose project "
                f"{compose_project} (nor named {self.container_name(missing[0])})"
            )
        if compose_project and self._containers:
            first = next(iter(self._containers.values()))
            self._network = next(iter(first.attrs["NetworkSettings"]["Networks"]), "")

    def down(self) -> None:
        """Remove every container and the network labelled as this stack's; idempotent."""
        if self.config.mode == "attach":  # the user's stack: they take it down
            self._containers.clear()
            return
        client = self._docker()
        flt = {"label": f"{PART_OF_LABEL}={self.part_of}"}
        errors = []
        try:
            for c in client.containers.list(all=True, filters=flt):
                self._save_log(c)
                c.remove(force=True)
            for n in client.networks.list(filters=flt):
                n.remove()
        except self._errors() as exc:
            errors.append(str(exc))
        self._containers.clear()
        if errors:
            raise StackError("docker teardown incomplete: " + "; ".join(errors))
        if self._cleanup is not None:
            self.ledger.cleanup_done(self._cleanup, ok=True)
            self._cleanup = None

    def _save_log(self, c: Any) -> None:
        """The container's output, as the process driver leaves its components' logs."""
        service = c.labels.get(NAME_LABEL) or c.name
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            (logs / f"{service}.log").write_bytes(c.logs(tail=LOG_LINES))
        except self._errors():  # the container still goes; only its log is lost
            log.exception("docker: could not save the log of %s", c.name)

    def restart(self, component: str, *, timeout: float) -> None:
        c = self._container(component)
        c.restart(timeout=int(max(1, timeout)))
        self._wait_ready(component, time.monotonic() + timeout)

    def pause(self, component: str) -> None:
        self._container(component).pause()

    def resume(self, component: str) -> None:
        self._container(component).unpause()

    def _container(self, component: str) -> Any:
        if component not in self._containers:
            names = set(self._compose["services"])
            raise StackError(f"no running component {component!r}{did_you_mean(component, names)}")
        return self._containers[component]

    # -- addresses and targets -----------------------------------------------------------

    def _published(self, component: str, port: int) -> int:
        c = self._container(component)
        binding = (c.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(f"{port}/tcp")
        if not binding:
            raise StackError(f"{component}: port {port} is not published")
        return int(binding[0]["HostPort"])

    def target_names(self) -> list[str]:
        return [*self._compose["services"], *self._edges]

    def endpoints(self) -> dict[str, str]:
        out = {}
        for c in self._containers:
            port = self._published(c, self.port(c))
            out[c] = f"{self.profile.ctype(c).scheme}://{HOST}:{port}"
        return out

    def container(self, component: str) -> Any:
        """The component's container (docker SDK object), state freshly read."""
        c = self._container(component)
        c.reload()
        return c

    def host_pid(self, component: str) -> int | None:
        """The container's init process as this host sees it, when the engine runs here.

        Process faults (process_kill, process_pause) then act on the container as on a
        local process; on a remote engine a PID means nothing here, so there is none.
        """
        access = self.config.access()
        where = access.base_url or access.docker_host or "unix://"
        if not where.startswith("unix://"):
            return None
        pid = int(self.container(component).attrs.get("State", {}).get("Pid") or 0)
        return pid or None

    def target(self, name: str) -> Target:
        if name in self._compose["services"]:
            url = self.endpoints()[name]
            return self._component_target(
                name,
                url=url,
                # The base URL, as the process driver gives it: injectors add the path.
                admin_url=url if self.profile.ctype(name).admin_path else "",
                pid=self.host_pid(name),
            )
        if name in self._edges:
            e = self._edges[name]
            proxy = str(self.profile.spec.proxy)
            listen = next(p["listen"] for p in self._proxies if p["name"] == e.proxy_name)
            return self._edge_target(
                e,
                url=f"{proxy}:{listen.rsplit(':', 1)[1]}",
                proxy_api=self.endpoints()[proxy],
                upstream=f"{e.dst}:{self.port(e.dst)}",
            )
        raise StackError(
            f"no component or edge {name!r}{did_you_mean(name, set(self.target_names()))}"
        )

    def versions(self) -> dict[str, str]:
        return {s: str(v["image"]) for s, v in self._compose["services"].items()}

    def describe(self) -> StackInfo:
        comps = []
        for s in self._compose["services"]:
            c = self._containers.get(s)
            if c is not None:
                c.reload()
            state = c.attrs.get("State", {}) if c is not None else {}
            health = _health(state)
            if health == "starting" and self.answers(s):
                health = "ready"  # Docker's next check will say so too
            url = self.endpoints()[s] if c is not None else ""
            comps.append(
                self._component_info(
                    s,
                    url=url,
                    admin_url="",
                    ports={"port": self.port(s)},
                    pid=state.get("Pid"),
                    health=str(health),
                    restarts=int(c.attrs.get("RestartCount", 0)) if c else 0,
                    log=f"docker logs {self.container_name(s)}",
                )
            )
        edges = [
            self._edge_info(e, listen="", upstream="", proxy_name=e.proxy_name, proxy_api="")
            for e in self._edges.values()
        ]
        return self._stack_info(comps, edges)


_COMPOSE = "com.docker.compose"  # docker-compose's label prefix

# Docker's words for a container's state, as the process driver's health vocabulary.
_HEALTH = {"healthy": "ready", "unhealthy": "unready", "starting": "starting"}


def _health(state: dict[str, Any]) -> str:
    if state.get("Paused"):
        return "paused"
    if not state.get("Running"):
        return str(state.get("Status") or "stopped")
    health = (state.get("Health") or {}).get("Status")
    return _HEALTH.get(str(health), "running") if health else "running"
