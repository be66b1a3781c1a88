"""Stack profiles: which components run, how they depend on each other, which edges are proxied.

A profile is YAML (``stack/local.yaml``), validated up front like a scenario:
every problem is reported at once with ``file:line:col`` and its YAML path.

Command lines and environment values are templates. The supervisor fills in:

* ``{host}``, ``{port}``, ``{port:NAME}`` (this component's named ports),
* ``{url:X}`` / ``{endpoint:X}`` (base URL of component X *as this component
  sees it*: the proxy's listen address when the edge ``this->X`` is proxied),
  ``{addr:X}`` (``host:port`` likewise),
* ``{python}``, ``{run_dir}``, ``{log_dir}``, ``{work_dir}`` (``<run_dir>/<name>``,
  created before start), ``{profile_dir}`` (the profile file's folder),
  ``{name}``, ``{policy}``,
  ``{setting:KEY}``, ``{libpython_dir}``, ``{env:VAR}``,
* ``{otlp}``: the trace collector's OTLP/HTTP URL (``http://127.0.0.1:PORT/v1/traces``),
  in a profile with ``spec.collector``; every other component's environment gets it as
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` unless its ``env`` says otherwise (docs/traces.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from faultday.core.components import COMPONENT_TYPES, ComponentType, ProbeKind
from faultday.core.plugins import did_you_mean
from faultday.core.preflight import PreflightSpec
from faultday.core.types import Duration
from faultday.core.yamlpos import (
    Document,
    PathKey,
    by_position,
    parse_file,
    validation_problems,
)
from faultday.errors import ScenarioError
from faultday_wire.problems import Problem

API_VERSION = "faultday/v1"
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
TEMPLATE_RE = re.compile(r"\{([a-z_]+)(?::([A-Za-z0-9_.-]+))?\}")
EDGE_SEP = "->"
OTEL_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
COLLECTOR_TYPE = "collector"
PACKAGED_PROFILES = Path(__file__).parents[1] / "stack" / "profiles"

_PLAIN_KEYS = frozenset(
    {
        "host",
        "port",
        "python",
        "run_dir",
        "log_dir",
        "work_dir",
        "profile_dir",
        "name",
        "policy",
        "libpython_dir",
        "otlp",
    }
)
_ARG_KEYS = frozenset({"port", "url", "endpoint", "addr", "setting", "env"})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RestartPolicy(StrEnum):
    """When the supervisor restarts a component whose process exited by itself.

    ``always`` also restarts after exit status 0: real vLLM's API server exits 0
    when its engine dies (GPU loss), so ``on-failure`` would leave it down.
    """

    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


class ProbeSpec(Strict):
    """How to tell that a component is ready."""

    kind: ProbeKind = Field(description="http, tcp, redis (PING) or none")
    path: str = Field(default="/", description="http: the path that must answer 2xx")
    port: str = Field(default="port", description="which named port to probe")
    timeout: Duration = Field(default=30.0, description="give up after this long")
    interval: Duration = Field(default=0.05, description="time between attempts")


class RestartSpec(Strict):
    policy: RestartPolicy = RestartPolicy.NO
    max_restarts: int = Field(default=5, ge=0, le=1000)
    backoff: Duration = Field(default=0.5, description="first delay; doubles per failure")
    max_backoff: Duration = 10.0


class ComponentSpec(Strict):
    """One component of the stack."""

    type: str = Field(default="command", description="a built-in component type")
    command: tuple[str, ...] = Field(default=(), description="replaces the type's command line")
    args: tuple[str, ...] = Field(default=(), description="appended to the command line")
    env: dict[str, str] = Field(default_factory=dict)
    ports: tuple[str, ...] | None = Field(default=None, description="named ports to allocate")
    depends_on: tuple[str, ...] = ()
    eager: bool = Field(
        default=False,
        description="start without waiting for the components it only addresses "
        "({url:X}, edges); it must tolerate dependencies that are still starting",
    )
    ready: ProbeSpec | None = None
    restart: RestartSpec = RestartSpec()
    stop_grace: Duration | None = Field(
        default=None, description="SIGTERM, then SIGKILL after this (default: the type's)"
    )
    settings: dict[str, JsonValue] = Field(default_factory=dict)
    image: str | None = Field(default=None, description="docker/k8s: overrides the type's image")
    gpu: bool = Field(default=False, description="docker/k8s: request an NVIDIA GPU")

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        # Here rather than after validation, so it is reported with any unknown keys.
        if v not in COMPONENT_TYPES:
            raise ValueError(f"unknown component type {v!r}{did_you_mean(v, set(COMPONENT_TYPES))}")
        return v


class ProfileMeta(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    description: str = ""


class StackSpec(Strict):
    policy: str = Field(default="default", description="agent policy; a scenario overrides it")
    proxy: str | None = Field(default="proxy", description="the fault proxy component, or null")
    collector: str | None = Field(
        default=None,
        description="the trace collector component (type collector), or null: every other "
        "component exports its spans there (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={otlp})",
    )
    components: dict[str, ComponentSpec]
    edges: tuple[str, ...] = Field(default=(), description="'from->to', proxied connections")
    preflight: PreflightSpec = Field(
        default_factory=PreflightSpec, description="`faultday preflight`: golden requests, limits"
    )


class StackProfile(Strict):
    api_version: Literal["faultday/v1"] = Field(alias="apiVersion")
    kind: Literal["StackProfile"]
    metadata: ProfileMeta
    spec: StackSpec
    source: str = Field(default="", exclude=True, description="the file it was loaded from")

    @property
    def name(self) -> str:
        return self.metadata.name

    def ctype(self, component: str) -> ComponentType:
        return COMPONENT_TYPES[self.spec.components[component].type]

    def ports(self, component: str) -> tuple[str, ...]:
        spec = self.spec.components[component]
        return spec.ports if spec.ports is not None else self.ctype(component).ports

    def probe(self, component: str) -> ProbeSpec:
        spec = self.spec.components[component]
        if spec.ready is not None:
            return spec.ready
        d = self.ctype(component).probe
        return ProbeSpec(kind=d.kind, path=d.path, port=d.port, timeout=f"{d.timeout}s")

    def argv_template(self, component: str) -> tuple[str, ...]:
        spec = self.spec.components[component]
        return (*(spec.command or self.ctype(component).argv), *spec.args)

    def env_template(self, component: str) -> dict[str, str]:
        return {**self.ctype(component).env, **self.spec.components[component].env}

    def trace_env(self, component: str) -> dict[str, str]:
        """The OpenTelemetry variables a component gets in a profile with a collector (templates),
        less those its own ``env`` sets; none for the collector itself or without one."""
        collector = self.spec.collector
        if collector is None or component == collector:
            return {}
        env = {
            OTEL_TRACES_ENDPOINT: "{otlp}",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": component,
            # The SDKs' batch processors export every 5 s by default: a run would wait that
            # long at its end for its last spans. Every 0.5 s, batches stay large under load.
            "OTEL_BSP_SCHEDULE_DELAY": "500",
        }
        own = self.spec.components[component].env
        return {k: v for k, v in env.items() if k not in own}

    def edges(self) -> list[Edge]:
        return [Edge.parse(e) for e in self.spec.edges]

    def dependencies(self, component: str) -> set[str]:
        """Everything that must be ready before ``component`` starts."""
        spec = self.spec.components[component]
        deps = set(spec.depends_on)
        for e in self.edges():
            if e.src == component:
                deps.add(e.dst)
                if self.spec.proxy:
                    deps.add(self.spec.proxy)
        texts = (*self.argv_template(component), *self.env_template(component).values())
        for text in texts:
            for key, arg in template_refs(text):
                if key in ("url", "endpoint", "addr") and arg:
                    deps.add(arg)
        # Only a component that names {otlp} itself waits for the collector. The variables
        # every component gets (trace_env) add no dependency: an exporter retries while the
        # collector starts, and a subset without the collector stays as small as it was.
        if any(key == "otlp" for text in texts for key, _ in template_refs(text)):
            deps.add(str(self.spec.collector))
        deps.discard(component)
        return deps

    def wait_for(self, component: str) -> set[str]:
        """What must be *ready* before ``component`` starts (all deps unless eager)."""
        spec = self.spec.components[component]
        if not spec.eager:
            return self.dependencies(component)
        # Its edges are created through the proxy's API once the proxy is ready,
        # while it starts (Stack.up), so not even the proxy holds it back.
        return set(spec.depends_on) - {component}

    def start_order(self) -> list[str]:
        """Components in a dependency-respecting order (validated acyclic at load)."""
        order: list[str] = []
        seen: set[str] = set()

        def visit(c: str) -> None:
            if c in seen:
                return
            seen.add(c)
            for d in sorted(self.dependencies(c)):
                visit(d)
            order.append(c)

        for c in self.spec.components:
            visit(c)
        return order

    def target_names(self) -> list[str]:
        return [*self.spec.components, *(e.name for e in self.edges())]

    def without_collector(self) -> StackProfile:
        """This profile less its trace collector (component and ``spec.collector``), for a
        driver that does not wire traces (no ``{otlp}``, no OTEL_* variables)."""
        collector = self.spec.collector
        if collector is None:
            return self
        comps = {k: v for k, v in self.spec.components.items() if k != collector}
        spec = self.spec.model_copy(update={"components": comps, "collector": None})
        return self.model_copy(update={"spec": spec})

    def subset(self, names: list[str] | tuple[str, ...]) -> StackProfile:
        """The named components plus everything they need; edges among them only."""
        keep: set[str] = set()
        todo = list(names)
        while todo:
            c = todo.pop()
            if c in keep:
                continue
            if c not in self.spec.components:
                raise ScenarioError(
                    [
                        Problem(
                            self.source or self.name,
                            1,
                            1,
                            "spec.components",
                            f"no component {c!r}{did_you_mean(c, set(self.spec.components))}",
                        )
                    ]
                )
            keep.add(c)
            todo.extend(self.dependencies(c))
        comps = {k: v for k, v in self.spec.components.items() if k in keep}
        edges = tuple(e.name for e in self.edges() if e.src in keep and e.dst in keep)
        proxy = self.spec.proxy if self.spec.proxy in keep else None
        collector = self.spec.collector if self.spec.collector in keep else None
        spec = self.spec.model_copy(
            update={"components": comps, "edges": edges, "proxy": proxy, "collector": collector}
        )
        return self.model_copy(update={"spec": spec})


@dataclass(frozen=True, slots=True)
class Edge:
    src: str
    dst: str

    @property
    def name(self) -> str:
        return f"{self.src}{EDGE_SEP}{self.dst}"

    @property
    def proxy_name(self) -> str:
        # Toxiproxy names appear in URL paths; keep them free of '>'.
        return f"{self.src}_to_{self.dst}"

    @classmethod
    def parse(cls, text: str) -> Edge:
        src, _, dst = text.partition(EDGE_SEP)
        return cls(src.strip(), dst.strip())


def template_refs(text: str) -> Iterator[tuple[str, str | None]]:
    for m in TEMPLATE_RE.finditer(text):
        yield m.group(1), m.group(2)


def _check_templates(
    doc: Document, profile: StackProfile, name: str, path: PathKey
) -> list[Problem]:
    problems: list[Problem] = []
    spec = profile.spec.components[name]
    ports = profile.ports(name)
    texts: list[tuple[PathKey, str]] = []
    texts += [((*path, "command", i), t) for i, t in enumerate(spec.command)]
    texts += [((*path, "args", i), t) for i, t in enumerate(spec.args)]
    texts += [((*path, "env", k), t) for k, t in spec.env.items()]
    for where, text in texts:
        for key, arg in template_refs(text):
            if key == "otlp" and profile.spec.collector is None:
                problems.append(
                    doc.problem(where, "{otlp} needs a trace collector: spec.collector")
                )
            elif arg is None and key not in _PLAIN_KEYS:
                msg = f"unknown template {{{key}}}{did_you_mean(key, set(_PLAIN_KEYS | _ARG_KEYS))}"
                problems.append(doc.problem(where, msg))
            elif arg is not None and key not in _ARG_KEYS:
                problems.append(doc.problem(where, f"unknown template {{{key}:{arg}}}"))
            elif key == "port" and arg is not None and arg not in ports:
                problems.append(doc.problem(where, f"no port named {arg!r}; ports: {ports}"))
            elif key in ("url", "endpoint", "addr") and arg not in profile.spec.components:
                comps = set(profile.spec.components)
                problems.append(
                    doc.problem(where, f"no component {arg!r}{did_you_mean(str(arg), comps)}")
                )
            elif key == "setting" and arg not in spec.settings:
                problems.append(doc.problem(where, f"no setting {arg!r} in settings"))
    return problems


def _check_component(doc: Document, profile: StackProfile, name: str) -> list[Problem]:
    path: PathKey = ("spec", "components", name)
    spec = profile.spec.components[name]
    problems: list[Problem] = []
    if not re.match(NAME_PATTERN, name):
        problems.append(doc.problem(path, "component names are lower-case slugs", key=True))
    if spec.type not in COMPONENT_TYPES:
        hint = did_you_mean(spec.type, set(COMPONENT_TYPES))
        return [
            *problems,
            doc.problem((*path, "type"), f"unknown component type {spec.type!r}{hint}"),
        ]
    if not profile.argv_template(name):
        problems.append(doc.problem(path, "type 'command' needs a 'command' list"))
    comps = set(profile.spec.components)
    for i, dep in enumerate(spec.depends_on):
        if dep not in comps:
            msg = f"no component {dep!r}{did_you_mean(dep, comps)}"
            problems.append(doc.problem((*path, "depends_on", i), msg))
    probe = profile.probe(name)
    if probe.kind != ProbeKind.NONE and probe.port not in profile.ports(name):
        problems.append(doc.problem((*path, "ready", "port"), f"no port named {probe.port!r}"))
    return problems + _check_templates(doc, profile, name, path)


def _check_edges(doc: Document, profile: StackProfile) -> list[Problem]:
    problems: list[Problem] = []
    comps = set(profile.spec.components)
    seen: set[str] = set()
    for i, text in enumerate(profile.spec.edges):
        where: PathKey = ("spec", "edges", i)
        if EDGE_SEP not in text:
            problems.append(doc.problem(where, f"an edge is written 'from->to'; got {text!r}"))
            continue
        e = Edge.parse(text)
        for end in (e.src, e.dst):
            if end not in comps:
                problems.append(
                    doc.problem(where, f"no component {end!r}{did_you_mean(end, comps)}")
                )
        if e.src == e.dst:
            problems.append(doc.problem(where, "an edge joins two different components"))
        if e.name in seen:
            problems.append(doc.problem(where, f"duplicate edge {e.name!r}"))
        seen.add(e.name)
        if profile.spec.proxy in (e.src, e.dst):
            problems.append(doc.problem(where, "the proxy itself cannot be an edge's end"))
    proxy = profile.spec.proxy
    if proxy is not None and proxy not in comps and profile.spec.edges:
        problems.append(doc.problem(("spec", "proxy"), f"no component {proxy!r}"))
    return problems


def _check_cycles(doc: Document, profile: StackProfile) -> list[Problem]:
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(c: str, trail: list[str]) -> list[str] | None:
        state[c] = 1
        for d in sorted(profile.dependencies(c)):
            if d not in profile.spec.components:
                continue
            if state.get(d) == 1:
                return [*trail, c, d]
            if d not in state and (cyc := visit(d, [*trail, c])):
                return cyc
        state[c] = 2
        return None

    for c in profile.spec.components:
        if c not in state and (cyc := visit(c, [])):
            loop = " -> ".join(cyc[cyc.index(cyc[-1]) :])
            return [doc.problem(("spec", "components", c), f"dependency cycle: {loop}", key=True)]
    return []


def _check_collector(doc: Document, profile: StackProfile) -> list[Problem]:
    collector = profile.spec.collector
    if collector is None:
        return []
    spec = profile.spec.components.get(collector)
    if spec is None:
        comps = set(profile.spec.components)
        msg = f"no component {collector!r}{did_you_mean(collector, comps)}"
        return [doc.problem(("spec", "collector"), msg)]
    if spec.type != COLLECTOR_TYPE:
        msg = f"component {collector!r} is of type {spec.type!r}, not {COLLECTOR_TYPE!r}"
        return [doc.problem(("spec", "collector"), msg)]
    return []


def profile_from_document(doc: Document) -> StackProfile:
    """Validate a parsed document; raise ScenarioError listing every problem."""
    try:
        profile = StackProfile.model_validate(doc.data)
    except ValidationError as exc:
        found = validation_problems(doc, exc, model=StackProfile)
        raise ScenarioError(by_position(found)) from exc
    profile = profile.model_copy(update={"source": doc.file})
    problems: list[Problem] = []
    for name in profile.spec.components:
        problems += _check_component(doc, profile, name)
    problems += _check_edges(doc, profile)
    problems += _check_collector(doc, profile)
    if not problems:
        problems += _check_cycles(doc, profile)
    if problems:
        raise ScenarioError(by_position(problems))
    return profile


def resolve_profile_path(name_or_path: str, *, base_dir: Path) -> Path:
    """``local`` → ``<base_dir>/stack/local.yaml``, else the packaged copy; a path as given."""
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        p = Path(name_or_path)
        return p if p.is_absolute() else base_dir / p
    for folder in (base_dir / "stack", PACKAGED_PROFILES):
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted(
        {
            p.stem
            for d in (base_dir / "stack", PACKAGED_PROFILES)
            if d.is_dir()
            for p in d.glob("*.yaml")
        }
    )
    raise ScenarioError(
        [
            Problem(
                name_or_path,
                1,
                1,
                "",
                f"no stack profile named {name_or_path!r}{did_you_mean(name_or_path, set(known))}",
            )
        ]
    )


def load_profile(name_or_path: str, *, base_dir: Path) -> StackProfile:
    """Load and validate a stack profile by name or path; ScenarioError with positions."""
    return profile_from_document(parse_file(resolve_profile_path(name_or_path, base_dir=base_dir)))
