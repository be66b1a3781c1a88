"""A stack profile as a compose project on faultday's own image.

Every component runs from one image (``docker-build/Dockerfile``): the same command
line the process driver runs, with the in-container ports below, so the local
profile needs no image but faultday's. (``faultday.stack.render`` writes the
other rendering, on the official images, for a GPU host.) The fault proxy is
faultday's Toxiproxy-compatible proxy, loaded with every edge at start; a
component reaches a dependency through its edge as ``<proxy>:<edge port>`` and
every other one by its service name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from faultday.core.components import ProbeKind
from faultday.core.profile import TEMPLATE_RE, RestartPolicy, StackProfile

IMAGE_ENV = "FAULTDAY_IMAGE"
DEFAULT_IMAGE = "faultday/faultday:latest"
ALLOWED_HOSTS_ENV = "FAULTDAY_ALLOWED_HOSTS"  # faultday_wire.webguard reads it
CONFIG_DIR = "/etc/faultday"  # {profile_dir}: the profile's files, and the proxy's edges
DATA_DIR = "/data"  # {run_dir}, {work_dir}, {log_dir}: the container's own folder
EDGE_PORT_BASE = 20000
COMPOSE_FILE = "compose.yaml"
PROXY_CONFIG = "toxiproxy.json"

# In-container ports by type and port name: each container has its own network
# namespace, so the fixed numbers of the official images serve every profile.
_PORTS: dict[str, dict[str, int]] = {
    "redis": {"port": 6379},
    "triton": {"port": 8000, "grpc": 8001, "metrics": 8002},
    "qdrant": {"port": 6333},
    "llmsim": {"port": 8000},
    "vllm": {"port": 8000},
    "proxy": {"port": 8474},
    "tools": {"port": 8080},
    "agent": {"port": 8080},
}
_OTHER_PORT = 8080
# /dev/shm for types that keep shared memory segments (docker's default is 64m):
# PyTriton's data segments, and vLLM's message queues (~100 MB each, several a server).
_SHM_SIZE = {"vllm": "1g"}
_SHM_DEFAULT = "256m"
_PROFILE_FILE = re.compile(r"\{profile_dir\}/([A-Za-z0-9_.-]+)")


def faultday_image(override: str | None = None) -> str:
    """The image tag: ``--image``, else ``$FAULTDAY_IMAGE``, else the default."""
    return override or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def container_ports(profile: StackProfile, component: str) -> dict[str, int]:
    """Named in-container ports; a port a type does not list gets the next free number."""
    known = _PORTS.get(profile.spec.components[component].type, {})
    out: dict[str, int] = {}
    spare = _OTHER_PORT
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
    ports = container_ports(profile, component)
    return ports.get("port") or next(iter(ports.values()))


@dataclass(frozen=True, slots=True)
class ComposeProject:
    """What the renderer wrote: the compose document, the proxy's edges, the files."""

    doc: dict[str, Any]
    proxies: list[dict[str, Any]]
    files: list[Path]

    @property
    def services(self) -> dict[str, Any]:
        return dict(self.doc["services"])


class _Render:
    def __init__(self, profile: StackProfile, *, image: str, data_dir: str) -> None:
        self.p = profile
        self.image = image
        self.data_dir = data_dir
        self.proxy = profile.spec.proxy
        self.edges = profile.edges() if self.proxy else []
        self.edge_port = {e.name: EDGE_PORT_BASE + i for i, e in enumerate(self.edges)}

    def url(self, src: str, dst: str) -> str:
        scheme = self.p.ctype(dst).scheme
        edge = f"{src}->{dst}"
        if edge in self.edge_port:
            return f"{scheme}://{self.proxy}:{self.edge_port[edge]}"
        return f"{scheme}://{dst}:{main_port(self.p, dst)}"

    def text(self, c: str, template: str) -> str:
        ports = container_ports(self.p, c)

        def sub(m: re.Match[str]) -> str:
            key, arg = m.group(1), m.group(2)
            if key in ("url", "endpoint"):
                return self.url(c, str(arg))
            if key == "addr":
                return self.url(c, str(arg)).split("://", 1)[1]
            if key == "port":
                return str(ports[arg or "port"])
            if key == "setting":
                return str(self.p.spec.components[c].settings[str(arg)])
            plain = {
                "python": "python",
                "host": "0.0.0.0",  # inside the container; published on 127.0.0.1 only
                "run_dir": DATA_DIR,
                "work_dir": DATA_DIR,
                "log_dir": DATA_DIR,
                "profile_dir": CONFIG_DIR,
                "name": c,
                "policy": self.p.spec.policy,
                "libpython_dir": "",
            }
            return plain.get(key, "")  # {env:VAR}: the container's environment has none

        return TEMPLATE_RE.sub(sub, template)

    def command(self, c: str) -> list[str]:
        argv = [self.text(c, a) for a in self.p.argv_template(c)]
        if c == self.proxy:
            argv += ["--config", f"{CONFIG_DIR}/{PROXY_CONFIG}"]
        return argv

    def environment(self, c: str) -> dict[str, str]:
        env = {}
        for k, v in self.p.env_template(c).items():
            value = self.text(c, v).strip(":")
            if value:
                env[k] = value
        # Services call each other by service name; their Host guard must accept it.
        env[ALLOWED_HOSTS_ENV] = ",".join(self.p.spec.components)
        return env

    def healthcheck(self, c: str) -> dict[str, Any] | None:
        probe = self.p.probe(c)
        port = container_ports(self.p, c).get(probe.port, main_port(self.p, c))
        if probe.kind == ProbeKind.NONE:
            return None
        if probe.kind == ProbeKind.HTTP:
            test = [
                "CMD",
                "curl",
                "-fsS",
                "-o",
                "/dev/null",
                f"http://127.0.0.1:{port}{probe.path}",
            ]
        elif probe.kind == ProbeKind.REDIS:
            test = ["CMD", "redis-cli", "-p", str(port), "ping"]
        else:
            code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"
            test = ["CMD", "python", "-c", code]
        return {"test": test, "interval": "1s", "timeout": "3s", "retries": 300}

    def service(self, c: str) -> dict[str, Any]:
        spec = self.p.spec.components[c]
        svc: dict[str, Any] = {
            "image": spec.image or self.image,
            "command": self.command(c),
            "environment": self.environment(c),
            "restart": restart_policy(self.p, c),
            "init": True,  # reaps what the service forks; passes signals on
            "ports": [f"127.0.0.1::{main_port(self.p, c)}"],
            # The component's folder on the host, as the process driver's work_dir: the
            # checks read the agent's audit and traces there.
            "volumes": [f"./etc:{CONFIG_DIR}:ro", f"{self.data_dir}/{c}:{DATA_DIR}"],
        }
        deps = sorted(self.p.wait_for(c))
        if deps:
            svc["depends_on"] = {d: {"condition": "service_healthy"} for d in deps}
        if hc := self.healthcheck(c):
            svc["healthcheck"] = hc
        if self.p.ctype(c).shm_segments:
            svc["shm_size"] = _SHM_SIZE.get(spec.type, _SHM_DEFAULT)
        return svc

    def proxies(self) -> list[dict[str, Any]]:
        return [
            {
                "name": e.proxy_name,
                "listen": f"0.0.0.0:{self.edge_port[e.name]}",
                "upstream": f"{e.dst}:{main_port(self.p, e.dst)}",
                "enabled": True,
            }
            for e in self.edges
        ]

    def profile_files(self) -> list[Path]:
        """Files the command lines name under ``{profile_dir}``, beside the profile."""
        if not self.p.source:
            return []
        here = Path(self.p.source).parent
        names = {
            m.group(1)
            for c in self.p.spec.components
            for a in self.p.argv_template(c)
            for m in _PROFILE_FILE.finditer(a)
        }
        return [here / n for n in sorted(names)]


def render_compose(
    profile: StackProfile,
    *,
    out: Path,
    image: str | None = None,
    project: str | None = None,
    data_dir: str = "./data",
) -> ComposeProject:
    """Write ``compose.yaml`` and ``etc/`` (the profile's files, the proxy's edges) to ``out``.

    Each component's ``/data`` is ``<data_dir>/<component>``, relative to ``out``.
    """
    r = _Render(profile, image=faultday_image(image), data_dir=data_dir)
    etc = out / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    files = []
    for src in r.profile_files():
        files.append(Path(shutil.copy2(src, etc / src.name)))
    proxies = r.proxies()
    if r.proxy:
        f = etc / PROXY_CONFIG
        f.write_text(json.dumps(proxies, indent=2) + "\n")
        files.append(f)
    doc = {
        "version": "2.4",  # docker-compose 1.29 (Debian 12) needs it for depends_on conditions
        "services": {c: r.service(c) for c in profile.start_order()},
    }
    compose = out / COMPOSE_FILE
    header = (
        f"# `faultday stack render --driver docker` from profile {profile.name}, on {r.image}.\n"
        f"# docker-compose -p {project or 'faultday-' + profile.name} up -d\n"
    )
    compose.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return ComposeProject(doc=doc, proxies=proxies, files=[compose, *files])
