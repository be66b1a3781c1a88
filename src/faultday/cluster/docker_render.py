"""A stack profile as a compose project: the one compose renderer, for the docker driver
and ``faultday stack render --driver docker``.

Two sets of images (``images``):

* ``faultday`` (the docker driver's default): every component runs from faultday's
  own image (``docker-build/Dockerfile``) with the process driver's command line and
  the in-container ports below, so the local profile needs no image but faultday's.
  The fault proxy is faultday's Toxiproxy-compatible proxy, loaded with every edge at
  start; ``etc/`` holds the profile's files and the proxy's edges.
* ``official``: the official images for a GPU host (``official_images``): vLLM,
  Triton with the embedder's model repository, Qdrant, and one Toxiproxy service
  carrying every edge.

Either way a component reaches a dependency through its edge as
``<proxy>:<edge port>`` and every other one by its service name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, Required, TypedDict

import yaml

from faultday.cluster.embedder_model import CONFIG_PBTXT, MODEL_PY
from faultday.cluster.official_images import (
    READINESS_PATHS,
    TOXIPROXY_API_PORT,
    OfficialImages,
    ToxiproxyListener,
    edge_ports,
)
from faultday.core.components import ProbeKind
from faultday.core.profile import TEMPLATE_RE, RestartPolicy, StackProfile
from faultday_wire.webguard import ALLOWED_HOSTS_ENV

Images = Literal["faultday", "official"]
IMAGE_ENV = "FAULTDAY_IMAGE"
DEFAULT_IMAGE = "faultday/faultday:latest"
CONFIG_DIR = "/etc/faultday"  # {profile_dir}: the profile's files, and the proxy's edges
DATA_DIR = "/data"  # {run_dir}, {work_dir}, {log_dir}: the container's own folder
COMPOSE_FILE = "compose.yaml"
PROXY_CONFIG = "toxiproxy.json"

# faultday's image: in-container ports by type and port name. Each container has its
# own network namespace, so the fixed numbers of the official images serve every profile.
_FAULTDAY_PORTS: dict[str, dict[str, int]] = {
    "redis": {"port": 6379},
    "triton": {"port": 8000, "grpc": 8001, "metrics": 8002},
    "qdrant": {"port": 6333},
    "llmsim": {"port": 8000},
    "vllm": {"port": 8000},
    "proxy": {"port": 8474},
    "tools": {"port": 8080},
    "agent": {"port": 8080},
}
_FIRST_SPARE_PORT = 8080
# /dev/shm for types that keep shared memory segments (docker's default is 64m):
# PyTriton's data segments, and vLLM's message queues (~100 MB each, several a server).
_SHM_SIZE = {"vllm": "1g"}
_SHM_DEFAULT = "256m"
_PROFILE_FILE = re.compile(r"\{profile_dir\}/([A-Za-z0-9_.-]+)")


# -- the compose file's shape (the parts faultday writes) --------------------------------


class Healthcheck(TypedDict):
    test: list[str]
    interval: str
    timeout: str
    retries: int


class DependsOn(TypedDict):
    condition: Literal["service_healthy", "service_started"]


class DeviceRequest(TypedDict):
    driver: str
    count: int
    capabilities: list[str]


class Reservations(TypedDict):
    devices: list[DeviceRequest]


class Resources(TypedDict):
    reservations: Reservations


class Deploy(TypedDict):
    resources: Resources


class ComposeService(TypedDict, total=False):
    image: Required[str]
    command: list[str]
    environment: dict[str, str]
    restart: str
    init: bool
    ports: list[str]
    volumes: list[str]
    depends_on: dict[str, DependsOn]
    healthcheck: Healthcheck
    shm_size: str
    deploy: Deploy


class ComposeDoc(TypedDict):
    version: NotRequired[str]
    name: NotRequired[str]
    services: dict[str, ComposeService]


@dataclass(frozen=True, slots=True)
class ComposeProject:
    """What the renderer wrote: the compose document, the proxy's edges, the files."""

    doc: ComposeDoc
    proxies: list[ToxiproxyListener]
    files: list[Path]

    @property
    def services(self) -> dict[str, ComposeService]:
        return dict(self.doc["services"])


# -- faultday's image ----------------------------------------------------------------------


def faultday_image(override: str | None = None) -> str:
    """The image tag: ``--image``, else ``$FAULTDAY_IMAGE``, else the default."""
    return override or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def container_ports(profile: StackProfile, component: str) -> dict[str, int]:
    """Named in-container ports; a port a type does not list gets the next free number."""
    known = _FAULTDAY_PORTS.get(profile.spec.components[component].type, {})
    out: dict[str, int] = {}
    spare = _FIRST_SPARE_PORT
    for name in profile.ports(component):
        if name in known:
            out[name] = known[name]
        else:
            out[name] = spare
            spare += 1
    return out


def restart_policy(profile: StackProfile, component: str) -> str:
    """Docker's restart policy for a component: ``always`` where the profile says so (real
    vLLM's API server exits 0 when its engine dies), else ``on-failure``."""
    spec = profile.spec.components[component]
    return "always" if spec.restart.policy == RestartPolicy.ALWAYS else "on-failure"


def main_port(profile: StackProfile, component: str) -> int:
    """The component's main in-container port on faultday's image."""
    ports = container_ports(profile, component)
    return ports.get("port") or next(iter(ports.values()))


class _FaultdayImageServices:
    """Compose services that run the process driver's command lines on faultday's image."""

    def __init__(self, profile: StackProfile, *, image: str, data_dir: str) -> None:
        self.profile = profile
        self.image = image
        self.data_dir = data_dir
        self.proxy = profile.spec.proxy
        self.edges = profile.edges() if self.proxy else []
        self.edge_port = edge_ports(self.edges)

    def url(self, src: str, dst: str) -> str:
        scheme = self.profile.ctype(dst).scheme
        edge = f"{src}->{dst}"
        if edge in self.edge_port:
            return f"{scheme}://{self.proxy}:{self.edge_port[edge]}"
        return f"{scheme}://{dst}:{main_port(self.profile, dst)}"

    def text(self, component: str, template: str) -> str:
        ports = container_ports(self.profile, component)

        def sub(match: re.Match[str]) -> str:
            key, arg = match.group(1), match.group(2)
            if key in ("url", "endpoint"):
                return self.url(component, str(arg))
            if key == "addr":
                return self.url(component, str(arg)).split("://", 1)[1]
            if key == "port":
                return str(ports[arg or "port"])
            if key == "setting":
                return str(self.profile.spec.components[component].settings[str(arg)])
            plain = {
                "python": "python",
                "host": "0.0.0.0",  # inside the container; published on 127.0.0.1 only
                "run_dir": DATA_DIR,
                "work_dir": DATA_DIR,
                "log_dir": DATA_DIR,
                "profile_dir": CONFIG_DIR,
                "name": component,
                "policy": self.profile.spec.policy,
                "libpython_dir": "",
            }
            return plain.get(key, "")  # {env:VAR}: the container's environment has none

        return TEMPLATE_RE.sub(sub, template)

    def command(self, component: str) -> list[str]:
        argv = [self.text(component, a) for a in self.profile.argv_template(component)]
        if component == self.proxy:
            argv += ["--config", f"{CONFIG_DIR}/{PROXY_CONFIG}"]
        return argv

    def environment(self, component: str) -> dict[str, str]:
        env = {}
        for key, template in self.profile.env_template(component).items():
            value = self.text(component, template).strip(":")
            if value:
                env[key] = value
        # Services call each other by service name; their Host guard must accept it.
        env[ALLOWED_HOSTS_ENV] = ",".join(self.profile.spec.components)
        return env

    def healthcheck(self, component: str) -> Healthcheck | None:
        probe = self.profile.probe(component)
        ports = container_ports(self.profile, component)
        port = ports.get(probe.port, main_port(self.profile, component))
        if probe.kind == ProbeKind.NONE:
            return None
        if probe.kind == ProbeKind.HTTP:
            url = f"http://127.0.0.1:{port}{probe.path}"
            test = ["CMD", "curl", "-fsS", "-o", "/dev/null", url]
        elif probe.kind == ProbeKind.REDIS:
            test = ["CMD", "redis-cli", "-p", str(port), "ping"]
        else:
            code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"
            test = ["CMD", "python", "-c", code]
        return {"test": test, "interval": "1s", "timeout": "3s", "retries": 300}

    def service(self, component: str) -> ComposeService:
        spec = self.profile.spec.components[component]
        svc: ComposeService = {
            "image": spec.image or self.image,
            "command": self.command(component),
            "environment": self.environment(component),
            "restart": restart_policy(self.profile, component),
            "init": True,  # reaps what the service forks; passes signals on
            "ports": [f"127.0.0.1::{main_port(self.profile, component)}"],
            # The component's folder on the host, as the process driver's work_dir: the
            # checks read the agent's audit and traces there.
            "volumes": [f"./etc:{CONFIG_DIR}:ro", f"{self.data_dir}/{component}:{DATA_DIR}"],
        }
        deps = sorted(self.profile.wait_for(component))
        if deps:
            svc["depends_on"] = {d: {"condition": "service_healthy"} for d in deps}
        if healthcheck := self.healthcheck(component):
            svc["healthcheck"] = healthcheck
        if self.profile.ctype(component).shm_segments:
            svc["shm_size"] = _SHM_SIZE.get(spec.type, _SHM_DEFAULT)
        return svc

    def proxies(self) -> list[ToxiproxyListener]:
        return [
            {
                "name": e.proxy_name,
                "listen": f"0.0.0.0:{self.edge_port[e.name]}",
                "upstream": f"{e.dst}:{main_port(self.profile, e.dst)}",
                "enabled": True,
            }
            for e in self.edges
        ]

    def profile_files(self) -> list[Path]:
        """Files the command lines name under ``{profile_dir}``, beside the profile."""
        if not self.profile.source:
            return []
        here = Path(self.profile.source).parent
        names = {
            m.group(1)
            for c in self.profile.spec.components
            for a in self.profile.argv_template(c)
            for m in _PROFILE_FILE.finditer(a)
        }
        return [here / n for n in sorted(names)]


def _render_on_faultday_image(
    profile: StackProfile, *, out: Path, image: str | None, project: str | None, data_dir: str
) -> ComposeProject:
    services = _FaultdayImageServices(profile, image=faultday_image(image), data_dir=data_dir)
    etc = out / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    files = [Path(shutil.copy2(src, etc / src.name)) for src in services.profile_files()]
    proxies = services.proxies()
    if services.proxy:
        f = etc / PROXY_CONFIG
        f.write_text(json.dumps(proxies, indent=2) + "\n")
        files.append(f)
    doc: ComposeDoc = {
        "version": "2.4",  # docker-compose 1.29 (Debian 12) needs it for depends_on conditions
        "services": {c: services.service(c) for c in profile.start_order()},
    }
    compose = out / COMPOSE_FILE
    header = (
        f"# `faultday stack render --driver docker` from profile {profile.name}, "
        f"on {services.image}.\n"
        f"# docker-compose -p {project or 'faultday-' + profile.name} up -d\n"
    )
    compose.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return ComposeProject(doc=doc, proxies=proxies, files=[compose, *files])


# -- the official images -------------------------------------------------------------------


def _gpu_deploy() -> Deploy:
    """One GPU reserved; a new object each time, which YAML would otherwise write as an alias."""
    device: DeviceRequest = {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    return {"resources": {"reservations": {"devices": [device]}}}


def _official_healthcheck(images: OfficialImages, component: str) -> Healthcheck | None:
    kind = images.component_type(component)
    if kind == "redis":
        test = ["CMD", "redis-cli", "ping"]
    elif kind in READINESS_PATHS and kind != "qdrant":  # qdrant's image has no curl
        url = f"http://localhost:{images.port(component).number}{READINESS_PATHS[kind]}"
        test = ["CMD", "curl", "-fsS", url]
    else:
        return None
    return {"test": test, "interval": "2s", "timeout": "2s", "retries": 60}


def _official_service(images: OfficialImages, component: str) -> ComposeService:
    kind = images.component_type(component)
    svc: ComposeService = {"image": images.image(component), "restart": "on-failure"}
    command = images.command(component, k8s=False)
    if kind == "proxy":
        svc["command"] = ["-host=0.0.0.0", f"-config=/config/{PROXY_CONFIG}"]
        svc["volumes"] = [f"./{PROXY_CONFIG}:/config/{PROXY_CONFIG}:ro"]
        svc["ports"] = [f"127.0.0.1::{TOXIPROXY_API_PORT}"]
    elif command:
        svc["command"] = command
    if kind == "triton":
        svc["volumes"] = ["./models:/models:ro"]
    if kind == "agent":
        svc["volumes"] = ["./agent.yaml:/etc/faultday/agent.yaml:ro"]
    deps = sorted(images.profile.dependencies(component))
    if deps:
        svc["depends_on"] = {d: _official_depends_on(images, d) for d in deps}
    if healthcheck := _official_healthcheck(images, component):
        svc["healthcheck"] = healthcheck
    if images.gpu(component):
        svc["deploy"] = _gpu_deploy()
    return svc


def _official_depends_on(images: OfficialImages, dependency: str) -> DependsOn:
    """Wait for a dependency's healthcheck where it has one, else for its start."""
    if _official_healthcheck(images, dependency):
        return {"condition": "service_healthy"}
    return {"condition": "service_started"}


def _triton_model_repository(images: OfficialImages, out: Path) -> list[Path]:
    components = images.profile.spec.components
    if not any(images.component_type(c) == "triton" for c in components):
        return []
    model = out / "models" / "embedder"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(CONFIG_PBTXT)
    (model / "1" / "model.py").write_text(MODEL_PY)
    return [model / "config.pbtxt", model / "1" / "model.py"]


def _render_on_official_images(profile: StackProfile, *, out: Path) -> ComposeProject:
    images = OfficialImages(profile)
    services = {c: _official_service(images, c) for c in profile.spec.components}
    doc: ComposeDoc = {"name": f"faultday-{profile.name}", "services": services}
    out.mkdir(parents=True, exist_ok=True)
    compose = out / COMPOSE_FILE
    compose.write_text(
        f"# Rendered by `faultday stack render --driver docker` from {profile.name}.\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    files = [compose]
    proxies = images.listeners(images.edges, upstream_host=None)
    if images.edges:
        f = out / PROXY_CONFIG
        f.write_text(json.dumps(proxies, indent=2) + "\n")
        files.append(f)
    files += _triton_model_repository(images, out)
    return ComposeProject(doc=doc, proxies=proxies, files=files)


def render_compose(
    profile: StackProfile,
    *,
    out: Path,
    images: Images = "faultday",
    image: str | None = None,
    project: str | None = None,
    data_dir: str = "./data",
) -> ComposeProject:
    """Write ``profile`` as a compose project into ``out``.

    ``images="faultday"``: ``compose.yaml`` and ``etc/`` (the profile's files, the proxy's
    edges), every component on ``image`` [``faultday_image()``]; each component's
    ``/data`` is ``<data_dir>/<component>``, relative to ``out``; ``project`` names the
    compose project in the file's header. ``images="official"``: ``compose.yaml``,
    ``toxiproxy.json`` and Triton's model repository, on the official images (``image``,
    ``project`` and ``data_dir`` do not apply).
    """
    profile = profile.without_collector()  # no trace wiring in containers yet (docs/traces.md)
    if images == "official":
        return _render_on_official_images(profile, out=out)
    return _render_on_faultday_image(
        profile, out=out, image=image, project=project, data_dir=data_dir
    )
