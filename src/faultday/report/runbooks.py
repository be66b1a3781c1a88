"""Runbooks: one jinja2 template per failure mode, filled with a stack's facts and game-day numbers.

Templates live in ``runbooks/<failure-mode>.md.j2`` and extend ``_runbook.md.j2``,
which fixes the section structure; a driver (``local``, ``docker``, ``k8s``)
supplies the concrete commands through the ``cmd`` object, so runbooks for two
drivers differ in their commands and agree in their structure.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import jinja2
import yaml
from markdown_it import MarkdownIt

from faultday.core.journal import Journal
from faultday.errors import FaultdayError, UsageError
from faultday.report import markdown
from faultday.report.html import runbook_index_page, runbook_page
from faultday.report.markdown import markdown_html

log = logging.getLogger(__name__)

RUNBOOK_SUFFIX = ".md.j2"
LAYOUT = "_runbook.md.j2"
NAMESPACE = "faultday"  # Kubernetes namespace and compose project of the rendered stack
LLM_TYPES = frozenset({"llmsim", "vllm"})
_LINE_END = re.compile(r"\r\n|\r|\n")
# Service ports of the docker/k8s renderings (the official images' defaults).
SERVICE_PORTS = {
    "llmsim": 8000,
    "vllm": 8000,
    "triton": 8000,
    "qdrant": 6333,
    "redis": 6379,
    "agent": 8080,
    "tools": 8090,
    "proxy": 8474,
    "command": 8080,
}


class RunbookError(FaultdayError):
    """A runbook template is missing or does not render."""


class Driver(StrEnum):
    LOCAL = "local"
    DOCKER = "docker"
    K8S = "k8s"


@dataclass(frozen=True, slots=True)
class ComponentFact:
    name: str
    type: str


@dataclass(frozen=True, slots=True)
class PolicyFacts:
    """The agent policy numbers a runbook quotes (``stack/agent.yaml``), as written there."""

    name: str = "default"
    model_call_timeout: str = "n/a"
    tool_call_timeout: str = "n/a"
    request_timeout: str = "n/a"
    redis_timeout: str = "n/a"
    vector_timeout: str = "n/a"
    retry_attempts: str = "n/a"
    retry_backoff_max: str = "n/a"
    retry_budget_ratio: str = "n/a"
    breakers: bool = False
    breaker_threshold: str = "n/a"
    breaker_reset_after: str = "n/a"
    fallback: bool = False
    max_in_flight: str = "n/a"
    queue_timeout: str = "n/a"


@dataclass(frozen=True, slots=True)
class StackFacts:
    """What a runbook needs to know about the stack it is for."""

    profile: str
    driver: Driver
    components: tuple[ComponentFact, ...]
    edges: tuple[str, ...] = ()
    policy: PolicyFacts = field(default_factory=PolicyFacts)

    def has(self, name: str) -> bool:
        return any(c.name == name for c in self.components)

    def of_type(self, *types: str) -> list[str]:
        return [c.name for c in self.components if c.type in types]

    def type_of(self, name: str) -> str:
        return next((c.type for c in self.components if c.name == name), "command")

    def first(self, *types: str, default: str) -> str:
        names = self.of_type(*types)
        return names[0] if names else default

    @property
    def llms(self) -> list[str]:
        return self.of_type(*LLM_TYPES)

    @property
    def llm_primary(self) -> str:
        llms = self.llms
        return next((n for n in llms if "primary" in n), llms[0] if llms else "llm-primary")

    @property
    def llm_backup(self) -> str:
        llms = [n for n in self.llms if n != self.llm_primary]
        return next((n for n in llms if "backup" in n), llms[0] if llms else "llm-backup")

    @property
    def agent(self) -> str:
        return self.first("agent", default="agent")

    @property
    def vector(self) -> str:
        return self.first("qdrant", default="qdrant")

    @property
    def embedder(self) -> str:
        return self.first("triton", default="triton")

    @property
    def redis(self) -> str:
        return self.first("redis", default="redis")

    @property
    def tools(self) -> str:
        return self.first("tools", default="tools")

    def edge(self, dst: str) -> str:
        return next((e for e in self.edges if e.endswith(f"->{dst}")), f"{self.agent}->{dst}")


@dataclass(frozen=True, slots=True)
class Measured:
    """One check's result at a game day, as a runbook quotes it."""

    scenario: str
    runbook: str
    check: str
    label: str
    window: str
    expected: str
    observed: str
    verdict: str
    date: str


class Commands:
    """Concrete commands for one driver; every driver answers the same questions."""

    def __init__(self, facts: StackFacts) -> None:
        self.facts = facts
        self.driver = facts.driver

    def _port(self, component: str) -> int:
        return SERVICE_PORTS.get(self.facts.type_of(component), 8080)

    def status(self) -> str:
        return {
            Driver.LOCAL: f"faultday stack status --profile {self.facts.profile}",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} ps",
            Driver.K8S: f"kubectl -n {NAMESPACE} get pods,svc -o wide",
        }[self.driver]

    def logs(self, component: str) -> str:
        return {
            Driver.LOCAL: f"faultday stack logs {component} --profile {self.facts.profile}",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} logs --since 15m {component}",
            Driver.K8S: f"kubectl -n {NAMESPACE} logs deploy/{component} --since=15m "
            "--all-containers",
        }[self.driver]

    def restart(self, component: str) -> str:
        return {
            # The supervisor's on-failure policy brings a killed component back on its ports.
            Driver.LOCAL: f"kill -KILL <pid of {component} from `{self.status()}`>"
            "   # restart policy on-failure starts it again",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} restart {component}",
            Driver.K8S: f"kubectl -n {NAMESPACE} rollout restart deploy/{component} && "
            f"kubectl -n {NAMESPACE} rollout status deploy/{component} --timeout=120s",
        }[self.driver]

    def stop(self, component: str) -> str:
        return {
            Driver.LOCAL: f"kill -STOP <pid of {component} from `{self.status()}`>"
            "   # kill -CONT <pid> to undo",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} stop {component}",
            Driver.K8S: f"kubectl -n {NAMESPACE} scale deploy/{component} --replicas=0",
        }[self.driver]

    def start(self, component: str) -> str:
        return {
            Driver.LOCAL: f"kill -CONT <pid of {component}>",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} start {component}",
            Driver.K8S: f"kubectl -n {NAMESPACE} scale deploy/{component} --replicas=1",
        }[self.driver]

    def metrics(self, component: str, pattern: str) -> str:
        port = self._port(component)
        return {
            Driver.LOCAL: f"curl -s <url of {component} from `{self.status()}`>/metrics"
            f" | grep -E '{pattern}'",
            Driver.DOCKER: "curl -s http://"
            f"$(docker compose -p {NAMESPACE} port {component} {port})"
            f"/metrics | grep -E '{pattern}'",
            Driver.K8S: f"kubectl get --raw /api/v1/namespaces/{NAMESPACE}/services/"
            f"{component}:{port}/proxy/metrics | grep -E '{pattern}'",
        }[self.driver]

    def health(self, component: str, path: str = "/health") -> str:
        port = self._port(component)
        return {
            Driver.LOCAL: f"curl -s -o /dev/null -w '%{{http_code}}\\n' "
            f"<url of {component} from `{self.status()}`>{path}",
            Driver.DOCKER: f"curl -s -o /dev/null -w '%{{http_code}}\\n' "
            f"http://$(docker compose -p {NAMESPACE} port {component} {port}){path}",
            Driver.K8S: f"kubectl get --raw /api/v1/namespaces/{NAMESPACE}/services/"
            f"{component}:{port}/proxy{path}",
        }[self.driver]

    def proxies(self) -> str:
        return {
            Driver.LOCAL: f"curl -s <url of proxy from `{self.status()}`>/proxies",
            Driver.DOCKER: "curl -s http://"
            f"$(docker compose -p {NAMESPACE} port toxiproxy 8474)/proxies",
            Driver.K8S: f"kubectl -n {NAMESPACE} exec deploy/{self.facts.agent} -c toxiproxy -- "
            "wget -qO- http://127.0.0.1:8474/proxies",
        }[self.driver]

    def gpu(self, component: str) -> str:
        return {
            Driver.LOCAL: "nvidia-smi --query-gpu=index,name,temperature.gpu,utilization.gpu,"
            "memory.used,memory.total --format=csv; dmesg -T | grep -i xid | tail -5",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} exec {component} nvidia-smi",
            Driver.K8S: f"kubectl -n {NAMESPACE} get pod -l app={component} -o wide && "
            "kubectl describe node <node> | grep -A8 -E 'Conditions|nvidia.com/gpu'",
        }[self.driver]

    def dcgm_where(self, component: str) -> str:
        """Where a replica's dcgm-exporter metrics are scraped, in this kind of stack."""
        return {
            # The simulator serves dcgm-exporter's fields on the replica's own /metrics.
            Driver.LOCAL: f"/metrics of {component}",
            Driver.DOCKER: f"/metrics of the {component} container (or dcgm-exporter, :9400)",
            Driver.K8S: f"dcgm-exporter on the node of {component} (DaemonSet, :9400)",
        }[self.driver]

    def dcgm(self, component: str, pattern: str) -> str:
        """dcgm-exporter's fields for the GPU of a replica, filtered by ``pattern``."""
        if self.driver == Driver.K8S:
            return (
                f"kubectl -n gpu-operator exec ds/nvidia-dcgm-exporter -- "
                f"curl -s localhost:9400/metrics | grep -E '{pattern}'"
                f"   # on the node of {component}: kubectl get pod -l app={component} -o wide"
            )
        return self.metrics(component, pattern)

    def kernel_log(self) -> str:
        return {
            Driver.LOCAL: "dmesg -T | grep -E 'NVRM: (Xid|GPU at PCI)' | tail -5",
            Driver.DOCKER: "dmesg -T | grep -E 'NVRM: (Xid|GPU at PCI)' | tail -5"
            "   # the host's kernel log",
            Driver.K8S: "kubectl debug node/<node> -it --image=busybox -- "
            "dmesg | grep -E 'NVRM: (Xid|GPU at PCI)' | tail -5",
        }[self.driver]

    def cordon(self, component: str) -> str:
        return {
            Driver.LOCAL: f"# one host, no node to drain: keep {component} out "
            "until the GPU is back",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} stop {component}"
            "   # one host: no node to drain",
            Driver.K8S: f"kubectl cordon <node of {component}> && "
            f"kubectl -n {NAMESPACE} delete pod -l app={component}",
        }[self.driver]

    def redis_cli(self, command: str) -> str:
        r = self.facts.redis
        return {
            Driver.LOCAL: f"redis-cli -p <port of {r} from `{self.status()}`> {command}",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} exec {r} redis-cli {command}",
            Driver.K8S: f"kubectl -n {NAMESPACE} exec deploy/{r} -- redis-cli {command}",
        }[self.driver]

    def events(self) -> str:
        return {
            Driver.LOCAL: f"tail -n 50 <run folder>/journal.json   # or `{self.status()}`",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} events --since 30m --json | tail -50",
            Driver.K8S: f"kubectl -n {NAMESPACE} get events --sort-by=.lastTimestamp | tail -30",
        }[self.driver]

    def recover(self) -> str:
        base = "faultday recover --report-dir reports"
        if self.driver == Driver.K8S:
            return (
                f"{base} && kubectl -n {NAMESPACE} delete podchaos,networkchaos,stresschaos --all"
            )
        return base

    def rollback(self, component: str) -> str:
        return {
            Driver.LOCAL: f"git checkout <previous tag> -- stack/ && "
            f"faultday stack down --profile {self.facts.profile} && "
            f"faultday stack up --profile {self.facts.profile}",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} up -d --no-deps {component}"
            "   # after pinning the previous image tag",
            Driver.K8S: f"kubectl -n {NAMESPACE} rollout undo deploy/{component} && "
            f"kubectl -n {NAMESPACE} rollout status deploy/{component} --timeout=300s",
        }[self.driver]

    def collect(self) -> str:
        return {
            Driver.LOCAL: "tar czf incident-$(date +%Y%m%dT%H%M).tgz <run folder>",
            Driver.DOCKER: f"docker compose -p {NAMESPACE} logs --no-color --since 2h "
            "> incident-$(date +%Y%m%dT%H%M).log",
            Driver.K8S: f"kubectl -n {NAMESPACE} get events,pods -o yaml > incident-events.yaml && "
            f"for d in $(kubectl -n {NAMESPACE} get deploy -o name); do "
            f"kubectl -n {NAMESPACE} logs $d --since=2h --all-containers "
            "> $(basename $d).log; done",
        }[self.driver]


def driver_for(profile: str, explicit: str | None = None) -> Driver:
    """The driver a profile name implies (``k8s``/``kubernetes`` → k8s, ``docker`` → docker)."""
    if explicit:
        try:
            return Driver(explicit)
        except ValueError as exc:
            raise UsageError(f"unknown driver {explicit!r}; valid: local, docker, k8s") from exc
    name = Path(profile).stem
    if name in ("k8s", "kubernetes") or name.startswith("k8s"):
        return Driver.K8S
    if name.startswith("docker"):
        return Driver.DOCKER
    return Driver.LOCAL


def policy_facts(agent_yaml: Path, policy: str) -> PolicyFacts:
    """Numbers of one policy in ``stack/agent.yaml``; defaults when the file is absent."""
    if not agent_yaml.is_file():
        return PolicyFacts(name=policy)
    try:
        doc = yaml.safe_load(agent_yaml.read_text()) or {}
        p = (doc.get("policies") or {}).get(policy) or {}
    except (yaml.YAMLError, AttributeError) as exc:
        log.warning("cannot read %s: %s", agent_yaml, exc)
        return PolicyFacts(name=policy)
    t, r = p.get("timeouts") or {}, p.get("retries") or {}
    b, a = p.get("breakers") or {}, p.get("admission") or {}

    def s(d: dict[str, object], k: str) -> str:
        v = d.get(k)
        return "n/a" if v is None else str(v)

    return PolicyFacts(
        name=policy,
        model_call_timeout=s(t, "model_call"),
        tool_call_timeout=s(t, "tool_call"),
        request_timeout=s(t, "request"),
        redis_timeout=s(t, "redis"),
        vector_timeout=s(t, "vector"),
        retry_attempts=s(r, "attempts"),
        retry_backoff_max=s(r, "backoff_max"),
        retry_budget_ratio=s(r, "budget_ratio"),
        breakers=bool(b.get("enabled")),
        breaker_threshold=s(b, "threshold"),
        breaker_reset_after=s(b, "reset_after"),
        fallback=bool(p.get("fallback")),
        max_in_flight=s(a, "max_in_flight"),
        queue_timeout=s(a, "queue_timeout"),
    )


def facts_from_journal(journal: Journal, *, base_dir: Path) -> StackFacts:
    """Facts of the stack a run used, from its journal (the stack description it recorded)."""
    info = journal.stack
    raw_comps = info.get("components")
    comps: list[ComponentFact] = []
    if isinstance(raw_comps, list):
        for c in raw_comps:
            if isinstance(c, dict):
                comps.append(ComponentFact(str(c.get("name", "")), str(c.get("type", "command"))))
    raw_edges = info.get("edges")
    edges = (
        tuple(str(e.get("name", "")) for e in raw_edges if isinstance(e, dict))
        if isinstance(raw_edges, list)
        else ()
    )
    spec = journal.scenario.get("spec")
    wanted = spec.get("policy") if isinstance(spec, dict) else None
    policy = str(info.get("policy") or wanted or "default")
    return StackFacts(
        profile=str(info.get("profile") or journal.stack_profile or "local"),
        driver=Driver.LOCAL,
        components=tuple(comps),
        edges=edges,
        policy=policy_facts(base_dir / "stack" / "agent.yaml", policy),
    )


def find_runbook_dir(base_dir: Path) -> Path | None:
    """``<base_dir>/runbooks``, else the source checkout's (an editable install)."""
    for d in (base_dir / "runbooks", Path(__file__).resolve().parents[3] / "runbooks"):
        if (d / LAYOUT).is_file():
            return d
    return None


def runbook_names(runbook_dir: Path) -> list[str]:
    return sorted(
        p.name.removesuffix(RUNBOOK_SUFFIX)
        for p in runbook_dir.glob(f"*{RUNBOOK_SUFFIX}")
        if not p.name.startswith("_")
    )


def _env(runbook_dir: Path) -> jinja2.Environment:
    # Markdown escaping by default: stack facts and game-day numbers are quoted text
    # (a journal's component names, a scenario's labels); the HTML step escapes again.
    return markdown.environment(runbook_dir)


def render_runbook(
    name: str, *, facts: StackFacts, runbook_dir: Path, results: Sequence[Measured] = ()
) -> str:
    """One runbook as Markdown."""
    env = _env(runbook_dir)
    try:
        template = env.get_template(f"{name}{RUNBOOK_SUFFIX}")
    except jinja2.TemplateNotFound as exc:
        known = ", ".join(runbook_names(runbook_dir))
        raise RunbookError(
            f"no runbook template {name!r} in {runbook_dir}; known: {known}"
        ) from exc
    mine = [r for r in results if r.runbook == name]

    def measured(*checks: str) -> list[Measured]:
        return [r for r in mine if not checks or r.check in checks]

    try:
        return template.render(
            name=name,
            stack=facts,
            cmd=Commands(facts),
            p=facts.policy,
            results=mine,
            measured=measured,
            driver=str(facts.driver),
        )
    except jinja2.TemplateError as exc:
        raise RunbookError(f"runbook {name!r} does not render: {exc}") from exc


def _lines(text: str) -> list[str]:
    # CommonMark's line endings only: str.splitlines() also splits at \u2028 and the
    # like, which would let a quoted value inside a fence look like a line of its own.
    return _LINE_END.split(text.removesuffix("\n"))


def _outside_fences(text: str) -> list[tuple[str, bool]]:
    """Each line with whether it is Markdown (True) or inside a fenced code block (False)."""
    out, fence = [], ""
    for line in _lines(text):
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m and (not fence or m.group(1).startswith(fence)):
            fence = "" if fence else m.group(1)
            out.append((line, False))
            continue
        out.append((line, not fence))
    return out


def sections(text: str) -> dict[str, str]:
    """Level-2 sections of a Markdown document: heading → body."""
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line, prose in _outside_fences(text):
        if prose and line.startswith("## "):
            if current is not None:
                out[current] = "\n".join(lines).strip()
            current, lines = line[3:].strip(), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines).strip()
    return out


def headings(text: str) -> list[str]:
    return [ln.strip() for ln, prose in _outside_fences(text) if prose and ln.startswith("#")]


def plain_text(inline_markdown: str) -> str:
    """What a reader sees of one line of Markdown (escapes and entities resolved)."""
    tokens = MarkdownIt("commonmark", {"html": False}).parseInline(inline_markdown)
    return "".join(t.content for tok in tokens for t in tok.children or () if t.content)


@dataclass(frozen=True, slots=True)
class RenderedRunbook:
    name: str
    markdown: Path
    html: Path


def render_runbooks(
    *,
    facts: StackFacts,
    runbook_dir: Path,
    out_dir: Path,
    results: Iterable[Measured] = (),
    names: Sequence[str] | None = None,
) -> list[RenderedRunbook]:
    """Write ``<name>.md`` and ``<name>.html`` per runbook, plus ``index.md``/``index.html``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    res = list(results)
    done: list[RenderedRunbook] = []
    for name in names or runbook_names(runbook_dir):
        text = render_runbook(name, facts=facts, runbook_dir=runbook_dir, results=res)
        md_path, html_path = out_dir / f"{name}.md", out_dir / f"{name}.html"
        md_path.write_text(text, encoding="utf-8")
        title = next((plain_text(h[2:]) for h in headings(text) if h.startswith("# ")), name)
        html_path.write_text(
            runbook_page(title=title, body=markdown_html(text), facts=facts), encoding="utf-8"
        )
        done.append(RenderedRunbook(name, md_path, html_path))
    (out_dir / "index.md").write_text(
        f"# Runbooks — {markdown.inline(facts.profile)} ({markdown.inline(facts.driver)})\n\n"
        + "".join(f"- [{markdown.inline(r.name)}]({r.markdown.name})\n" for r in done),
        encoding="utf-8",
    )
    (out_dir / "index.html").write_text(
        runbook_index_page(facts=facts, runbooks=done), encoding="utf-8"
    )
    return done
