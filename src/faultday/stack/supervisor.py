"""The process supervisor: start, probe, restart, pause and stop child processes.

Every child runs in its own session (so its own process group) and is written
to the ledger *before* we wait for it, so ``faultday recover`` can stop it if
the harness dies at any instant. Stopping signals the whole group: services
such as PyTriton start helpers (tritonserver, Python backend stubs) that must
go with them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil

from faultday.core.components import ProbeKind
from faultday.core.ledger import Ledger, ProcessRecord
from faultday.core.marked import ledger_pids
from faultday.core.profile import ProbeSpec, RestartPolicy, RestartSpec
from faultday.errors import StackError
from faultday.stack import shm
from faultday.stack.tmpdirs import held_tmp_dirs, left_near, remove_tmp_dirs, triton_starts

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
PROC = Path("/proc")
LOG_TAIL_LINES = 20
MONITOR_INTERVAL = 0.1
# A process that stayed up this long has recovered; its backoff starts over.
HEALTHY_RESET_S = 30.0
SEGMENT_SCAN_S = 2.0  # how often the monitor notes the shared memory of components that use it
STATUS_LINE_MAX = 1024
MARKED_ROUNDS = 3  # looks for marked processes: one spawned while the others stopped is caught


class ProcState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    EXITED = "exited"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything needed to (re)start one component's process."""

    component: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_path: Path
    cwd: Path
    restart: RestartSpec
    stop_grace: float
    term_group: bool = True  # SIGTERM to the whole group, or to the main process only
    orphan_grace: float | None = None  # helpers left after the main process: then SIGKILL
    shm_segments: bool = False  # remove its PyTriton /dev/shm segments once it is gone


_LOWEST_PORT = 10000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_RNG = random.SystemRandom()


def free_port(host: str = HOST, *, exclude: Collection[int] = ()) -> int:
    """A port free on ``host`` now, chosen below the kernel's ephemeral range.

    Ports are planned before the processes that bind them start (the agent is
    told its edges' ports up front). A port from the ephemeral range could be
    taken meanwhile as the source port of any outgoing connection; one below it
    can only be taken by another explicit bind. ``exclude`` holds the ports a
    plan has already handed out: each is still free (nothing binds it until its
    process starts), so a second draw could return it again — with a stack's
    ~18 ports in ~22 700 that happens to one start in 150.
    """
    high = _ephemeral_low() - 1
    for _ in range(64):  # bounded: a busy range falls back to the kernel's choice
        port = _RNG.randint(_LOWEST_PORT, high) if high > _LOWEST_PORT else 0
        if port in exclude:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    for _ in range(64):  # the kernel's choice from the ephemeral range
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in exclude:
            return port
    raise StackError(f"no free TCP port on {host}: 128 tries found each one taken")


class PortPlan:
    """Hands out ports that are free now and distinct from each other."""

    def __init__(self, host: str = HOST) -> None:
        self.host = host
        self.taken: set[int] = set()

    def take(self) -> int:
        port = free_port(self.host, exclude=self.taken)
        self.taken.add(port)
        return port


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log file (reads at most the final 64 KiB)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def http_status(host: str, port: int, path: str, *, timeout: float) -> int | None:
    """Status code of one ``GET path`` (HTTP/1.1, connection closed); None if no valid answer.

    A raw socket rather than ``httpx.get``: that builds a client and an SSL context
    per call (~30 ms of CPU), and a start-up polls every component 20 times a second.
    """
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(request.encode("ascii"))
            head = b""
            while b"\r\n" not in head and len(head) < STATUS_LINE_MAX:
                chunk = s.recv(STATUS_LINE_MAX)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return None
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


def probe_once(probe: ProbeSpec, *, host: str, port: int, timeout: float = 1.0) -> bool:
    """One readiness attempt; True when the service answers as expected."""
    if probe.kind == ProbeKind.NONE:
        return True
    if probe.kind == ProbeKind.HTTP:
        status = http_status(host, port, probe.path, timeout=timeout)
        return status is not None and 200 <= status < 300
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            if probe.kind == ProbeKind.TCP:
                return True
            s.settimeout(timeout)
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def group_pids(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies left out)."""
    pids = []
    try:
        entries = [e.name for e in PROC.iterdir() if e.name.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = (PROC / entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        state, _ppid, pgrp, *_ = stat.rpartition(")")[2].split()
        if pgrp == str(pgid) and state != "Z":
            pids.append(int(entry))
    return pids


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie stays in its group until its parent reaps it. An orphaned helper's new
    # parent (init; a VM's init here) may take a second or more to do that: the group
    # is gone for us once only zombies are left.
    return bool(group_pids(pgid))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Managed:
    """One supervised component process (mutable; guarded by the supervisor's lock)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.popen: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None
        self.state = ProcState.STOPPED
        self.restarts = 0
        self.failures = 0  # consecutive, for the backoff
        self.started_at = 0.0
        self.next_restart_at = 0.0
        self.last_exit: int | None = None
        self.segments: set[str] = set()  # shared memory seen held by its group
        self.tmp_dirs: set[Path] = set()  # Triton's hard-coded /tmp folders seen held by it
        self.segments_seen_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None


class Supervisor:
    """Owns the child processes of one stack; restarts them per policy."""

    def __init__(
        self, *, ledger: Ledger, on_event: Callable[[str, str], None] | None = None
    ) -> None:
        self.ledger = ledger
        self._procs: dict[str, Managed] = {}
        self._lock = threading.RLock()
        self._on_event = on_event
        self._stop_monitor = threading.Event()
        self._monitor: threading.Thread | None = None
        # Set while the stack is being stopped or a stop was asked for: no new spawns, and
        # waits for readiness end at once (a thread starting a component must not outlive it).
        self._closing = threading.Event()
        # Groups killed by the monitor whose segments are removed once they are gone.
        self._dead_groups: list[tuple[int, set[str], set[Path]]] = []

    def interrupt(self) -> None:
        """Stop starting things: refuse new spawns, end every wait for readiness now."""
        self._closing.set()

    def reopen(self) -> None:
        """Allow spawns again (a stack brought up anew after a stop)."""
        self._closing.clear()

    # -- starting ---------------------------------------------------------------

    def start(self, launch: Launch) -> Managed:
        """Spawn a component's process and record it in the ledger (no waiting)."""
        with self._lock:
            m = self._procs.get(launch.component)
            if m is not None and m.state in (ProcState.RUNNING, ProcState.PAUSED):
                raise StackError(f"component {launch.component!r} is already running")
            m = Managed(launch)
            self._procs[launch.component] = m
            self._spawn(m)
        self._ensure_monitor()
        return m

    def _spawn(self, m: Managed) -> None:
        launch = m.launch
        if self._closing.is_set():
            m.state = ProcState.EXITED
            raise StackError(f"component {launch.component!r} not started: the stack is stopping")
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The intent reaches the disk before the process exists: a harness killed right
        # after Popen leaves a marker recover finds the process (and its children) by.
        env = {**launch.env, **self.ledger.add_spawn(launch.component)}
        with launch.log_path.open("ab") as logf:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            logf.write(f"--- {stamp} faultday starts: {' '.join(launch.argv)}\n".encode())
            logf.flush()
            try:
                popen = subprocess.Popen(
                    list(launch.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=launch.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                m.state = ProcState.EXITED
                raise StackError(
                    f"component {launch.component!r} could not start {launch.argv[0]!r}: {exc}"
                ) from exc
        try:
            created = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            created = time.time()  # already gone; the record still lets recover skip it
        m.popen = popen
        m.record = ProcessRecord(launch.component, popen.pid, popen.pid, created)
        self.ledger.add_process(m.record)
        m.state = ProcState.RUNNING
        m.started_at = time.monotonic()
        log.info("started %s pid=%d", launch.component, popen.pid)
        self._event(launch.component, f"started pid={popen.pid}")

    def wait_ready(self, component: str, probe: ProbeSpec, *, port: int, timeout: float) -> None:
        """Poll the probe until it passes; StackError with the log's tail otherwise."""
        m = self._get(component)
        limit = min(timeout, probe.timeout)
        deadline = time.monotonic() + limit
        while True:
            if self._closing.is_set():
                raise StackError(f"component {component!r}: stopped while waiting for it")
            code = m.exit_code()
            if code is not None:
                raise self._failure(m, f"exited with code {code} before it was ready")
            if probe_once(probe, host=HOST, port=port, timeout=min(1.0, limit)):
                self._note_segments(m)
                return
            if time.monotonic() >= deadline:
                what = probe.path if probe.kind == ProbeKind.HTTP else probe.kind.value
                raise self._failure(
                    m, f"not ready after {limit:g}s (probe {probe.kind} {HOST}:{port} {what})"
                )
            time.sleep(probe.interval)

    def _note_segments(self, m: Managed) -> None:
        """Remember the shared memory its group holds now: a SIGKILL would leave it behind."""
        if m.launch.shm_segments and m.record is not None:
            pids = group_pids(m.record.pgid)
            m.segments |= shm.held_segments(pids)
            self._note_tmp_dirs(m, pids)
            m.segments_seen_at = time.monotonic()

    def _note_tmp_dirs(self, m: Managed, pids: list[int]) -> None:
        """Triton's /tmp folders, into the ledger as soon as they are seen: a stop that
        never finishes (the harness killed mid stack-down) leaves them to recover."""
        new = held_tmp_dirs(pids) - m.tmp_dirs
        for d in sorted(new):
            self.ledger.add_tmp(d)
        m.tmp_dirs |= new

    def _failure(self, m: Managed, why: str) -> StackError:
        lines = tail(m.launch.log_path)
        body = "\n".join(f"  | {ln}" for ln in lines) or "  | (empty)"
        return StackError(
            f"component {m.launch.component!r} {why}\n"
            f"log file: {m.launch.log_path}\n"
            f"last {len(lines)} log lines:\n{body}"
        )

    # -- stopping ---------------------------------------------------------------

    def stop(self, component: str, *, grace: float | None = None) -> None:
        self.stop_many([component], grace=grace)

    def stop_many(self, components: list[str], *, grace: float | None = None) -> None:
        """TERM every group at once, wait, then KILL what is left; idempotent."""
        with self._lock:
            victims = [self._procs[c] for c in components if c in self._procs]
            for m in victims:
                m.state = ProcState.STOPPED  # first, so the monitor does not restart it
            for m in victims:
                if m.record is not None and m.launch.shm_segments:
                    # Seen now, while alive: a SIGKILL below would leave them behind.
                    pids = group_pids(m.record.pgid)
                    m.segments = shm.held_segments(pids)
                    self._note_tmp_dirs(m, pids)
            for m in victims:
                if m.record is not None:
                    if m.launch.term_group:
                        _signal_group(m.record.pgid, signal.SIGTERM)
                    else:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(m.record.pid, signal.SIGTERM)
                    # A paused group holds SIGTERM pending until it runs again.
                    _signal_group(m.record.pgid, signal.SIGCONT)
        for m in victims:
            g = grace if grace is not None else m.launch.stop_grace
            self._reap(m, time.monotonic() + g)

    def _reap(self, m: Managed, deadline: float) -> None:
        if m.popen is None or m.record is None:
            return
        pgid = m.record.pgid
        if m.launch.orphan_grace is not None:
            deadline = self._wait_leader(m.popen, deadline, m.launch.orphan_grace)
        while time.monotonic() < deadline:
            if m.popen.poll() is not None and not _group_alive(pgid):
                break
            time.sleep(0.02)
        else:
            if m.popen.poll() is None or m.launch.orphan_grace is None:
                log.warning("%s did not stop in time; SIGKILL", m.launch.component)
            else:  # expected: helpers that outlive an orderly stop of their parent
                log.debug("%s: helpers outlived the main process; SIGKILL", m.launch.component)
            _signal_group(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                m.popen.wait(timeout=5.0)
            kill_deadline = time.monotonic() + 2.0
            while _group_alive(pgid) and time.monotonic() < kill_deadline:
                time.sleep(0.02)
        m.last_exit = m.popen.poll()
        if m.launch.shm_segments:
            shm.remove_orphaned(m.segments | shm.leader_segments(m.record.pid))
            remove_tmp_dirs(m.tmp_dirs)
            m.segments, m.tmp_dirs = set(), set()
        self.ledger.process_stopped(m.record.pid)
        self._event(m.launch.component, f"stopped pid={m.record.pid}")

    @staticmethod
    def _wait_leader(popen: subprocess.Popen[bytes], deadline: float, grace: float) -> float:
        """Wait for the main process alone; its stragglers then get only ``grace``."""
        while time.monotonic() < deadline and popen.poll() is None:
            time.sleep(0.02)
        if popen.poll() is None:
            return deadline
        return min(deadline, time.monotonic() + grace)

    def stop_all(self, *, grace: float | None = None) -> None:
        self._closing.set()
        self._stop_monitor.set()
        with self._lock:
            names = list(self._procs)
        self.stop_many(names, grace=grace)
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=2.0)
        self._monitor = None
        self._sweep_dead_groups(wait=2.0)

    def _sweep_dead_groups(self, *, wait: float = 0.0) -> None:
        """Remove the segments of groups the monitor killed, once those groups are gone."""
        deadline = time.monotonic() + wait
        with self._lock:
            while True:
                alive = [dead for dead in self._dead_groups if _group_alive(dead[0])]
                for dead in self._dead_groups:
                    if dead not in alive:
                        shm.remove_orphaned(dead[1])
                        remove_tmp_dirs(dead[2])
                self._dead_groups = alive
                if not alive or time.monotonic() >= deadline:
                    return
                time.sleep(0.02)

    # -- pause / resume / kill --------------------------------------------------

    def pause(self, component: str) -> None:
        m = self._running(component)
        assert m.record is not None
        _signal_group(m.record.pgid, signal.SIGSTOP)
        m.state = ProcState.PAUSED
        # Delivery is asynchronous; callers expect "paused" to be true on return.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                if psutil.Process(m.record.pid).status() in (
                    psutil.STATUS_STOPPED,
                    psutil.STATUS_ZOMBIE,
                ):
                    break
            except psutil.Error:
                break
            time.sleep(0.005)
        self._event(component, "paused")

    def resume(self, component: str) -> None:
        m = self._get(component)
        if m.record is None:
            raise StackError(f"component {component!r} has no process")
        _signal_group(m.record.pgid, signal.SIGCONT)
        if m.state == ProcState.PAUSED:
            m.state = ProcState.RUNNING
        self._event(component, "resumed")

    # -- queries ----------------------------------------------------------------

    def _get(self, component: str) -> Managed:
        with self._lock:
            m = self._procs.get(component)
        if m is None:
            raise StackError(f"component {component!r} was not started")
        return m

    def _running(self, component: str) -> Managed:
        m = self._get(component)
        if m.record is None or m.exit_code() is not None:
            raise StackError(f"component {component!r} is not running")
        return m

    def managed(self, component: str) -> Managed | None:
        with self._lock:
            return self._procs.get(component)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._procs)

    # -- restart policy ---------------------------------------------------------

    def _ensure_monitor(self) -> None:
        with self._lock:
            if self._monitor is not None and self._monitor.is_alive():
                return
            self._stop_monitor.clear()
            self._monitor = threading.Thread(
                target=self._watch, name="faultday-supervisor", daemon=True
            )
            self._monitor.start()

    def _watch(self) -> None:
        while not self._stop_monitor.wait(MONITOR_INTERVAL):
            with self._lock:
                for m in list(self._procs.values()):
                    self._check(m)
                if self._dead_groups:
                    self._sweep_dead_groups()

    def _check(self, m: Managed) -> None:
        now = time.monotonic()
        if m.state == ProcState.RESTARTING:
            if now >= m.next_restart_at:
                self._restart_now(m)
            return
        if m.state != ProcState.RUNNING:
            return
        code = m.exit_code()
        if code is None:
            if now - m.started_at > HEALTHY_RESET_S:
                m.failures = 0
            if m.launch.shm_segments and now - m.segments_seen_at > SEGMENT_SCAN_S:
                self._note_segments(m)  # a restarted instance makes new ones
            return
        assert m.record is not None
        # The leader is gone; do not leave its helpers behind before respawning.
        _signal_group(m.record.pgid, signal.SIGKILL)
        if m.launch.shm_segments:
            # Killed, not stopped: only its leader-named region is known by now.
            self._dead_groups.append(
                (m.record.pgid, m.segments | shm.leader_segments(m.record.pid), m.tmp_dirs)
            )
            m.segments, m.tmp_dirs = set(), set()
        self.ledger.process_stopped(m.record.pid)
        m.last_exit = code
        self._event(m.launch.component, f"exited code={code}")
        policy = m.launch.restart
        # A stop we asked for never gets here (stop_many marks it STOPPED first), so
        # "always" restarts only exits the component chose itself, status 0 included.
        if policy.policy == RestartPolicy.NO or (
            policy.policy == RestartPolicy.ON_FAILURE and code == 0
        ):
            m.state = ProcState.EXITED
            return
        if m.restarts >= policy.max_restarts:
            log.error("%s failed %d times; giving up", m.launch.component, m.restarts)
            m.state = ProcState.EXITED
            return
        delay = min(policy.backoff * (2**m.failures), policy.max_backoff)
        m.failures += 1
        m.state = ProcState.RESTARTING
        m.next_restart_at = now + delay
        log.warning("%s exited with %d; restart in %.2fs", m.launch.component, code, delay)

    def _restart_now(self, m: Managed) -> None:
        m.restarts += 1
        try:
            self._spawn(m)
        except StackError as exc:
            log.error("%s", exc)  # noqa: TRY400 - the message is the whole story
            m.state = ProcState.EXITED

    def respawn(self, component: str) -> Managed:
        """Start a stopped/exited component again with the same launch (same ports)."""
        m = self._get(component)
        with self._lock:
            if m.state in (ProcState.RUNNING, ProcState.PAUSED):
                raise StackError(f"component {component!r} is still running")
            m.restarts += 1
            self._spawn(m)
        self._ensure_monitor()
        return m

    def _event(self, component: str, what: str) -> None:
        if self._on_event is not None:
            try:
                self._on_event(component, what)
            except Exception:  # a hook must never break supervision; it is logged
                log.exception("supervisor event hook failed")


def stop_recorded_processes(ledger: Ledger, *, grace: float = 3.0) -> list[str]:
    """Stop every outstanding ProcessRecord by process group; never a recycled PID.

    For ``faultday recover``: the harness that started them is gone, so only the
    ledger knows them. Returns one message per record.
    """
    messages: list[str] = []
    todo: list[ProcessRecord] = []
    segments: dict[int, set[str]] = {}
    tmp_dirs: dict[int, set[Path]] = {}
    starts: dict[int, list[float]] = {}
    for rec in ledger.outstanding_processes():
        try:
            p = psutil.Process(rec.pid)
            same = abs(p.create_time() - rec.create_time) < 0.05
        except psutil.NoSuchProcess:
            same = None
        except psutil.Error as exc:
            messages.append(f"{rec.component} pid={rec.pid}: cannot inspect: {exc}")
            continue
        if same is False:
            # The PID now belongs to another process; its group id can't be ours either.
            messages.append(
                f"{rec.component} pid={rec.pid}: PID reused by another process; left alone"
            )
            ledger.process_stopped(rec.pid)
            continue
        if same is None and not _group_alive(rec.pgid):
            gone = _removed_segments(shm.leader_segments(rec.pid))
            messages.append(f"{rec.component} pid={rec.pid}: already gone{gone}")
            ledger.process_stopped(rec.pid)
            continue
        # Leader alive (verified), or leader gone with helpers left in its group: the
        # kernel never hands out a PID that is still in use as a process-group id.
        pids = group_pids(rec.pgid)
        segments[rec.pid] = shm.held_segments(pids)
        tmp_dirs[rec.pid] = held_tmp_dirs(pids)
        starts[rec.pid] = triton_starts(pids)
        _signal_group(rec.pgid, signal.SIGTERM)
        _signal_group(rec.pgid, signal.SIGCONT)
        todo.append(rec)
    deadline = time.monotonic() + grace
    for rec in todo:
        while _group_alive(rec.pgid) and time.monotonic() < deadline:
            _reap_child(rec.pid)
            time.sleep(0.02)
        how = "stopped (SIGTERM)"
        if _group_alive(rec.pgid):
            _signal_group(rec.pgid, signal.SIGKILL)
            how = "killed (SIGKILL after SIGTERM)"
            kill_deadline = time.monotonic() + 2.0
            while _group_alive(rec.pgid) and time.monotonic() < kill_deadline:
                _reap_child(rec.pid)
                time.sleep(0.02)
        gone = _removed_segments(segments.get(rec.pid, set()) | shm.leader_segments(rec.pid))
        # Once it is gone: a server killed mid-start leaves a folder no stub named yet.
        gone += _removed_dirs(left_near(starts.get(rec.pid, []), tmp_dirs.get(rec.pid, set())))
        messages.append(f"{rec.component} pid={rec.pid}: {how}{gone}")
        ledger.process_stopped(rec.pid)
    return messages


@dataclass(frozen=True, slots=True)
class MarkedStop:
    """What ``stop_marked_processes`` did: one message a process, and the counts."""

    messages: list[str]
    stopped: int = 0
    failed: int = 0


def stop_marked_processes(ledger: Ledger, *, grace: float = 3.0) -> MarkedStop:
    """Stop every live process carrying one of the ledger's markers; one message each.

    What ``stop_recorded_processes`` cannot know: a process spawned just before the
    harness died (its PID never written), a helper that left its group, a Locust
    worker. Found by the marker in its environment, never by its name.
    """
    pids = ledger_pids(ledger)
    if not pids:
        return MarkedStop([])
    segments: set[str] = set()
    dirs: set[Path] = set()
    starts: list[float] = []
    messages: list[str] = []
    stopped = failed = 0
    # A process being started as the others get their signal (PyTriton launching
    # tritonserver) is not in the first list: look again, a bounded number of times.
    for _ in range(MARKED_ROUNDS):
        if not pids:
            break
        segments |= shm.held_segments(pids)
        for pid in pids:
            segments |= shm.leader_segments(pid)
        dirs |= held_tmp_dirs(pids)
        starts += triton_starts(pids)
        lines, still = _stop_pids(pids, grace)
        messages += lines
        stopped, failed = stopped + len(pids) - len(still), len(still)
        pids = sorted(set(ledger_pids(ledger)) - set(still))
    # What a server killed mid-start made but no command line named yet.
    tail = _removed_segments(segments) + _removed_dirs(dirs | left_near(starts))
    if tail:
        messages.append(f"left by them{tail}")
    return MarkedStop(messages, stopped=stopped, failed=failed)


def _stop_pids(pids: list[int], grace: float) -> tuple[list[str], list[int]]:
    """SIGTERM (SIGCONT for paused ones), SIGKILL after ``grace``; one message each."""
    names = {pid: _describe(pid) for pid in pids}
    for pid in pids:
        _signal_pid_or_group(pid, signal.SIGTERM)
        _signal_pid_or_group(pid, signal.SIGCONT)
    left = _wait_gone(pids, time.monotonic() + grace)
    for pid in left:
        _signal_pid_or_group(pid, signal.SIGKILL)
    still = _wait_gone(left, time.monotonic() + 2.0)
    messages = []
    for pid in pids:
        how = "killed (SIGKILL after SIGTERM)" if pid in left else "stopped (SIGTERM)"
        if pid in still:
            how = "could NOT be stopped"
        messages.append(f"{names[pid]} pid={pid}: {how} (found by the run's marker)")
    return messages, still


def _describe(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "process"


def _signal_pid_or_group(pid: int, sig: signal.Signals) -> None:
    """The whole group when ``pid`` leads one (its helpers go too), else the process alone."""
    try:
        leader = os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    if leader:
        _signal_group(pid, sig)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: list[int], deadline: float) -> list[int]:
    """Wait until every pid is gone (zombies count as gone); returns those still running."""
    while True:
        alive = [pid for pid in pids if _running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        for pid in alive:
            _reap_child(pid)
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _removed_segments(names: set[str]) -> str:
    """Remove what the record's processes left in /dev/shm; a suffix for its message."""
    removed = shm.remove_orphaned(names)
    return f"; removed /dev/shm/{', /dev/shm/'.join(removed)}" if removed else ""


def _removed_dirs(dirs: set[Path]) -> str:
    """Remove Triton's /tmp folders of the record's processes; a suffix for its message."""
    removed = remove_tmp_dirs(dirs)
    return f"; removed {', '.join(removed)}" if removed else ""


def _reap_child(pid: int) -> None:
    # When the caller is the parent (same harness), reap so the zombie leaves the group.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
