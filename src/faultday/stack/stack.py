"""The process driver: a stack profile brought up as supervised local processes.

``Stack`` implements ``faultday.core.protocols.StackDriver`` (``up``/``down``/``restart``,
``pause``/``resume``, ``target(name)`` for injectors, ``describe()`` for the
journal and ``faultday stack status``) and ``Interruptible``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import httpx

from faultday.core.components import ProbeKind
from faultday.core.driverbase import DriverBase
from faultday.core.ledger import RUN_TMP_DIR, Ledger
from faultday.core.otlp import TRACES_PATH
from faultday.core.plugins import did_you_mean
from faultday.core.profile import TEMPLATE_RE, Edge, StackProfile
from faultday.core.spanstore import COLLECTOR_STATS_PATH, SPANS_DB, CollectorAddress
from faultday.core.stackinfo import ComponentInfo, EdgeInfo, StackInfo
from faultday.core.targets import Target
from faultday.errors import StackError
from faultday.stack.supervisor import (
    HOST,
    Launch,
    PortPlan,
    ProcState,
    Supervisor,
    probe_once,
    stop_recorded_processes,
)

log = logging.getLogger(__name__)

__all__ = ["ComponentInfo", "EdgeInfo", "Stack", "StackInfo", "stop_recorded_processes"]

PROXY_API_TIMEOUT = 5.0
LOG_DIR = "logs"
# An earlier stack's logs in a reused run folder (`faultday stack up --state-dir`), set
# aside by `up` as logs/previous/<UTC time they were set aside>/; the newest few are kept.
PREVIOUS_LOGS = "previous"
KEEP_PREVIOUS = 5
_STAMP = "%Y%m%dT%H%M%SZ"
_STAMP_RE = re.compile(r"^\d{8}T\d{6}Z(?:-\d+)?$")
TMP_DIR = RUN_TMP_DIR  # every component's TMPDIR; removed when the stack is down
RUN_MARKER = "FAULTDAY_STACK_RUN"
UP_TIMEOUT = 120.0  # seconds for every component to be ready, unless ``up`` is told otherwise


@dataclass(frozen=True, slots=True)
class _Plan:
    """Ports chosen for one ``up``: kept across restarts so edges stay valid."""

    ports: dict[str, dict[str, int]]
    edge_ports: dict[str, int]


_DISTS = {
    "triton": "nvidia-pytriton",
    "qdrant": "qdrant-edge-py",
    "vllm": "vllm",
}


def set_aside_logs(log_dir: Path) -> Path | None:
    """Move the ``*.log`` files an earlier stack left in ``log_dir`` to
    ``previous/<UTC time>/`` (keeping the newest ``KEEP_PREVIOUS`` such folders);
    return that folder, or None when there was nothing to move."""
    old = sorted(p for p in log_dir.glob("*.log") if p.is_file())
    if not old:
        return None
    previous = log_dir / PREVIOUS_LOGS
    stamp = datetime.now(UTC).strftime(_STAMP)
    try:
        previous.mkdir(exist_ok=True)
        sets = sorted(
            (d for d in previous.iterdir() if d.is_dir() and _STAMP_RE.match(d.name)),
            key=_set_order,
        )
        # Ups within one second: -2, -3 …, after the last of them (an older one may be gone).
        n = max((_set_order(d)[1] for d in sets if d.name.startswith(stamp)), default=0) + 1
        dest = previous / (stamp if n == 1 else f"{stamp}-{n}")
        dest.mkdir()
        for p in old:
            p.rename(dest / p.name)
        for d in [*sets, dest][:-KEEP_PREVIOUS]:
            shutil.rmtree(d)
    except OSError as exc:
        raise StackError(f"cannot set the earlier stack's logs in {log_dir} aside: {exc}") from exc
    log.info("an earlier stack's logs (%d files) moved to %s", len(old), dest)
    return dest


def _set_order(folder: Path) -> tuple[str, int]:
    stamp, _, n = folder.name.partition("-")
    return stamp, int(n or 1)


class Stack(DriverBase):
    """A running (or runnable) instance of a stack profile on this machine (a StackDriver)."""

    driver = "process"

    def __init__(
        self,
        profile: StackProfile,
        *,
        run_dir: Path,
        ledger: Ledger,
        policy: str | None = None,
    ) -> None:
        super().__init__(profile, run_dir=run_dir, ledger=ledger, policy=policy)
        self.supervisor = Supervisor(ledger=ledger)
        self._plan: _Plan | None = None
        self._edges = {e.name: e for e in profile.edges()}
        self._t_up = 0.0
        self._ready_s: dict[str, float] = {}
        self._tmp_home: Path | None = None

    # -- naming -------------------------------------------------------------------

    def target_names(self) -> list[str]:
        return self.profile.target_names()

    def log_path(self, component: str) -> Path:
        return self.run_dir / LOG_DIR / f"{component}.log"

    @property
    def proxied(self) -> bool:
        return self.profile.spec.proxy is not None

    # -- addresses ------------------------------------------------------------------

    def _plan_or_raise(self) -> _Plan:
        if self._plan is None:
            raise StackError("the stack is not up")
        return self._plan

    def _port(self, component: str, name: str = "port") -> int:
        return self._plan_or_raise().ports[component][name]

    def _url(self, component: str, port: int) -> str:
        return f"{self.profile.ctype(component).scheme}://{HOST}:{port}"

    def endpoints(self) -> dict[str, str]:
        """Component → base URL (direct, not through the proxy)."""
        return {c: self._url(c, self._port(c)) for c in self.profile.spec.components}

    def _seen_port(self, src: str, dst: str) -> int:
        """The port ``src`` must dial to reach ``dst``: the edge's when proxied."""
        name = f"{src}->{dst}"
        if self.proxied and name in self._edges:
            return self._plan_or_raise().edge_ports[name]
        return self._port(dst)

    def collector(self) -> CollectorAddress | None:
        """The trace collector's OTLP URL, /stats URL and span store; None without one.

        The store's path holds before ``up`` and after ``down`` (a run copies its spans
        from it once the stack is down); the URLs are "" while the stack is not up.
        """
        name = self.profile.spec.collector
        if name is None:
            return None
        base = self._url(name, self._port(name)) if self._plan is not None else ""
        return CollectorAddress(
            component=name,
            otlp_url=base + TRACES_PATH if base else "",
            stats_url=base + COLLECTOR_STATS_PATH if base else "",
            db_path=self.run_dir / name / SPANS_DB,
        )

    def _otlp_url(self) -> str:
        """``{otlp}``; "" without a collector (a profile using it then is refused at load)."""
        address = self.collector()
        return address.otlp_url if address is not None else ""

    def _proxy_api(self) -> str:
        proxy = self.profile.spec.proxy
        return self._url(proxy, self._port(proxy)) if proxy else ""

    # -- templates ------------------------------------------------------------------

    def _render(self, component: str, text: str) -> str:
        spec = self.profile.spec.components[component]

        def sub(m: re.Match[str]) -> str:
            key, arg = m.group(1), m.group(2)
            if key == "port":
                return str(self._port(component, arg or "port"))
            if key in ("url", "endpoint"):
                return self._url(arg, self._seen_port(component, arg))
            if key == "addr":
                return f"{HOST}:{self._seen_port(component, arg)}"
            if key == "setting":  # settings may use templates themselves
                return self._render(component, str(spec.settings[arg]))
            if key == "env":
                return os.environ.get(arg, "")
            plain = {
                "host": HOST,
                "python": sys.executable,
                "run_dir": str(self.run_dir),
                "log_dir": str(self.run_dir / LOG_DIR),
                "work_dir": str(self.run_dir / component),
                "profile_dir": str(Path(self.profile.source).resolve().parent)
                if self.profile.source
                else str(Path.cwd()),
                "name": component,
                "policy": self.policy,
                "libpython_dir": str(sysconfig.get_config_var("LIBDIR") or ""),
                "otlp": self._otlp_url(),
            }
            return plain[key]

        return TEMPLATE_RE.sub(sub, text)

    def _launch(self, component: str) -> Launch:
        spec = self.profile.spec.components[component]
        argv = tuple(self._render(component, a) for a in self.profile.argv_template(component))
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        # Inherited by every descendant: lets tests and `stack down` find strays.
        env[RUN_MARKER] = str(self.run_dir)
        # What a component writes to temporary files stays in the run folder (Python's
        # tempfile honours TMPDIR; PyTriton puts its workspace under PYTRITON_HOME).
        env["TMPDIR"] = str(self.run_dir / TMP_DIR)
        env["PYTRITON_HOME"] = str(self._short_tmp_home())
        if spec.type == "vllm":
            # vLLM binds its ZeroMQ sockets under VLLM_RPC_BASE_PATH (default: TMPDIR), and
            # a socket path longer than 107 bytes fails: a deep report folder put it past.
            ipc = self._short_tmp_home() / "vllm-ipc"
            ipc.mkdir(parents=True, exist_ok=True)  # the home is in the ledger already
            env["VLLM_RPC_BASE_PATH"] = str(ipc)
        # The profile's env comes last: it may set the OpenTelemetry variables otherwise.
        templates = {**self.profile.trace_env(component), **self.profile.env_template(component)}
        for k, v in templates.items():
            env[k] = self._render(component, v).strip(":")
        return Launch(
            component=component,
            argv=argv,
            env=env,
            log_path=self.log_path(component),
            cwd=self.run_dir,
            restart=spec.restart,
            stop_grace=(
                spec.stop_grace
                if spec.stop_grace is not None
                else self.profile.ctype(component).stop_grace
            ),
            term_group=self.profile.ctype(component).term_group,
            orphan_grace=self.profile.ctype(component).orphan_grace,
            shm_segments=self.profile.ctype(component).shm_segments,
        )

    # -- lifecycle --------------------------------------------------------------------

    def up(self, *, timeout: float | None = None) -> None:
        """Start every component in dependency order, independent ones in parallel."""
        if self._plan is not None:
            raise StackError("the stack is already up")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / LOG_DIR).mkdir(exist_ok=True)
        # The logs are this stack's alone: an earlier stack's lines would read as its own
        # (preflight failed a healthy stack on the last one's errors).
        set_aside_logs(self.run_dir / LOG_DIR)
        (self.run_dir / TMP_DIR).mkdir(exist_ok=True)
        self.supervisor.reopen()
        ports = PortPlan()  # distinct: each is still free until its process binds it
        self._plan = _Plan(
            ports={
                c: {p: ports.take() for p in self.profile.ports(c)}
                for c in self.profile.spec.components
            },
            edge_ports={e: ports.take() for e in self._edges} if self.proxied else {},
        )
        deadline = time.monotonic() + (UP_TIMEOUT if timeout is None else timeout)
        self._t_up = time.monotonic()
        self._ready_s = {}
        try:
            self._start_all(deadline)
        except BaseException:
            self.down()
            raise

    def _short_tmp_home(self) -> Path:
        """A short folder for Unix sockets (108-byte paths): PyTriton's home, vLLM's IPC.

        A run folder can be long (pytest's tmp paths), so it lives in the system's
        temporary folder, named after the ledger's marker and recorded in the ledger
        before it exists: ``down`` and ``faultday recover`` remove it.
        """
        if self._tmp_home is None:
            self._tmp_home = Path(tempfile.gettempdir()) / f"faultday-{self.ledger.marker()[:12]}"
            self.ledger.add_tmp(self._tmp_home)
        return self._tmp_home

    def interrupt(self) -> None:
        """End every wait for readiness now and start nothing more (a stop was asked for)."""
        self.supervisor.interrupt()

    def _start_all(self, deadline: float) -> None:
        comps = list(self.profile.start_order())
        pool = ThreadPoolExecutor(max_workers=max(1, len(comps)), thread_name_prefix="up")
        try:
            self._start_waves(pool, comps, deadline)
        except BaseException:
            # Threads still starting components must give up now, not at their readiness
            # timeouts, and spawn nothing once the stack is down.
            self.supervisor.interrupt()
            raise
        finally:
            pool.shutdown(wait=True)

    def _start_waves(self, pool: ThreadPoolExecutor, comps: list[str], deadline: float) -> None:
        deps = {c: self.profile.wait_for(c) for c in comps}
        done: set[str] = set()
        running: dict[Future[None], str] = {}
        proxy = self.profile.spec.proxy
        # Eager components start before the proxy is up; their edges follow it.
        late_edges = [e for e in self._edges.values() if self.profile.spec.components[e.src].eager]
        while len(done) < len(comps):
            if late_edges and self.proxied and proxy in done:
                self._post_edges(late_edges)
                late_edges = []
            for c in comps:
                if c not in done and c not in running.values() and deps[c] <= done:
                    running[pool.submit(self._start_one, c, deadline)] = c
            left = deadline - time.monotonic()
            finished, _ = wait(list(running), timeout=max(0.0, left), return_when=FIRST_COMPLETED)
            if not finished:
                names = ", ".join(sorted(running.values()))
                raise StackError(f"stack not up within the overall timeout; waiting for {names}")
            for f in finished:
                c = running.pop(f)
                f.result()  # raises the component's StackError
                done.add(c)

    def _start_one(self, component: str, deadline: float) -> None:
        (self.run_dir / component).mkdir(parents=True, exist_ok=True)
        if not self.profile.spec.components[component].eager:
            self._create_edges(component)
        self.supervisor.start(self._launch(component))
        self._wait_ready(component, deadline - time.monotonic())
        self._ready_s[component] = time.monotonic() - self._t_up
        log.info("%s ready", component)

    def _wait_ready(self, component: str, timeout: float) -> None:
        probe = self.profile.probe(component)
        port = self._port(component, probe.port) if probe.kind != ProbeKind.NONE else 0
        self.supervisor.wait_ready(component, probe, port=port, timeout=max(0.1, timeout))

    def _create_edges(self, component: str) -> None:
        """Create the proxies for the edges leaving ``component`` (Toxiproxy API)."""
        if not self.proxied:
            return
        self._post_edges([e for e in self._edges.values() if e.src == component])

    def _post_edges(self, edges: list[Edge]) -> None:
        if not edges:
            return
        # One client for them all: ``httpx.post`` builds a client and an SSL context
        # per call (~30 ms of CPU) while the components compete for the CPU.
        with httpx.Client(timeout=PROXY_API_TIMEOUT) as http:
            for e in edges:
                self._post_edge(http, e)

    def _post_edge(self, http: httpx.Client, e: Edge) -> None:
        plan = self._plan_or_raise()
        body = {
            "name": e.proxy_name,
            "listen": f"{HOST}:{plan.edge_ports[e.name]}",
            "upstream": f"{HOST}:{self._port(e.dst)}",
            "enabled": True,
        }
        try:
            r = http.post(f"{self._proxy_api()}/proxies", json=body)
        except httpx.HTTPError as exc:
            raise StackError(f"edge {e.name}: proxy API unreachable: {exc}") from exc
        if r.status_code == 409:  # already there (proxy kept it across a restart of src)
            return
        if r.status_code >= 300:
            raise StackError(f"edge {e.name}: proxy API answered {r.status_code}: {r.text[:300]}")

    def down(self) -> None:
        """Stop every process (by process group); idempotent, never raises for dead ones."""
        self.supervisor.stop_all()
        self._plan = None
        shutil.rmtree(self.run_dir / TMP_DIR, ignore_errors=True)
        if self._tmp_home is not None:
            shutil.rmtree(self._tmp_home, ignore_errors=True)

    def restart(self, component: str, *, timeout: float) -> None:
        """Stop a component and start it again on the same ports; wait until ready."""
        self._check_component(component)
        self.supervisor.stop(component)
        self.supervisor.respawn(component)
        self._wait_ready(component, timeout)
        if component == self.profile.spec.proxy:
            # A fresh proxy process knows no proxies.
            self._post_edges(list(self._edges.values()))

    def pause(self, component: str) -> None:
        self._check_component(component)
        self.supervisor.pause(component)

    def resume(self, component: str) -> None:
        self._check_component(component)
        self.supervisor.resume(component)

    def _check_component(self, component: str) -> None:
        comps = set(self.profile.spec.components)
        if component not in comps:
            raise StackError(f"no component {component!r}{did_you_mean(component, comps)}")

    # -- targets and descriptions -----------------------------------------------------

    def target(self, name: str) -> Target:
        """A component or an edge (``agent->qdrant``) resolved for an injector."""
        if name in self.profile.spec.components:
            m = self.supervisor.managed(name)
            url = self._url(name, self._port(name))
            return self._component_target(
                name,
                url=url,
                # Injectors append their own admin paths (/admin/faults/…) to this base,
                # like the llmsim and tools fault clients do; the full path is for display.
                admin_url=url if self.profile.ctype(name).admin_path else "",
                pid=m.pid if m is not None else None,
            )
        if name in self._edges:
            if not self.proxied:
                raise StackError(f"edge {name!r} is not proxied in profile {self.profile.name!r}")
            e = self._edges[name]
            plan = self._plan_or_raise()
            return self._edge_target(
                e,
                url=f"{HOST}:{plan.edge_ports[name]}",
                proxy_api=self._proxy_api(),
                upstream=f"{HOST}:{self._port(e.dst)}",
            )
        names = set(self.target_names())
        raise StackError(f"no component or edge {name!r}{did_you_mean(name, names)}")

    def ready_times(self) -> dict[str, float]:
        """Seconds from the start of ``up`` until each component was ready (for bench/)."""
        return dict(self._ready_s)

    def versions(self) -> dict[str, str]:
        return {c: _version_of(self.profile.ctype(c).name) for c in self.profile.spec.components}

    def _health(self, component: str) -> str:
        m = self.supervisor.managed(component)
        if m is None:
            return "not started"
        if m.state != ProcState.RUNNING:
            return m.state.value
        if m.exit_code() is not None:
            return "exited"
        probe = self.profile.probe(component)
        port = self._port(component, probe.port) if probe.kind != ProbeKind.NONE else 0
        return "ready" if probe_once(probe, host=HOST, port=port, timeout=0.5) else "unready"

    def describe(self) -> StackInfo:
        comps = []
        up = self._plan is not None
        for c in self.profile.spec.components:
            m = self.supervisor.managed(c)
            url = self._url(c, self._port(c)) if up else ""
            comps.append(
                self._component_info(
                    c,
                    url=url,
                    admin_url=self._shown_admin_url(c, url),
                    ports=dict(self._plan.ports[c]) if self._plan else {},
                    pid=m.pid if m is not None else None,
                    health=self._health(c) if up else "stopped",
                    restarts=m.restarts if m is not None else 0,
                    log=str(self.log_path(c)),
                )
            )
        edges = []
        for e in self._edges.values():
            listen = ""
            upstream = ""
            if up and self._plan is not None:
                upstream = f"{HOST}:{self._port(e.dst)}"
                listen = f"{HOST}:{self._plan.edge_ports[e.name]}" if self.proxied else upstream
            edges.append(
                self._edge_info(
                    e,
                    listen=listen,
                    upstream=upstream,
                    proxy_name=e.proxy_name if self.proxied else "",
                    proxy_api=self._proxy_api() if up and self.proxied else "",
                )
            )
        return self._stack_info(comps, edges)


def _version_of(ctype: str) -> str:
    if ctype == "redis":
        try:
            out = subprocess.run(
                ["redis-server", "--version"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        for word in out.split():
            if word.startswith("v="):
                return word[2:]
        return out.strip() or "unknown"
    dist = _DISTS.get(ctype, "faultday")
    try:
        return f"{dist} {version(dist)}"
    except PackageNotFoundError:
        return "unknown"
