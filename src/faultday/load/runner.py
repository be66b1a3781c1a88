"""Locust as a participant of a run: a subprocess (or a master and N workers) and an event sink."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from faultday.core.ledger import RUN_TMP_DIR, ProcessRecord
from faultday.core.loadconfig import (
    ENV_VAR,
    AnswerSampling,
    HttpRequestSpec,
    LoadConfig,
    Shape,
    ShapeSpec,
    TracePropagation,
    Workload,
)
from faultday.core.protocols import RunView, SpecView
from faultday.core.scenario import LoadSpec, TracesSpec
from faultday.core.timebase import TimeBase
from faultday.core.vocab import EventKind
from faultday.errors import FaultdayError
from faultday.load.answers import write_answers
from faultday.load.sink import EventSink, SinkStats

log = logging.getLogger(__name__)

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
STOP_GRACE = 3.0  # real seconds between SIGTERM and SIGKILL
WORKERS_TIMEOUT = 30.0  # real seconds the master waits for its workers


class LoadError(FaultdayError):
    """The load generator could not be configured or started."""


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """What the scenario's ``load:`` block does not (yet) say; defaults suit the agent runtime."""

    http: HttpRequestSpec = field(default_factory=HttpRequestSpec)
    think_time: float = 0.0  # real seconds
    request_timeout: float = 30.0
    task_timeout: float = 120.0
    log_name: str = "load"
    # The scenario's traces: block, as the load reads it (propagation_of).
    traces: TracePropagation = field(default_factory=TracePropagation)


def shape_of(spec: LoadSpec) -> ShapeSpec:
    return ShapeSpec(
        kind=Shape(str(spec.shape)),
        users=spec.users,
        spawn_rate=spec.spawn_rate,
        step_users=spec.step_users,
        step_every=spec.step_every,
        spike_users=spec.spike_users,
        spike_at=spec.spike_at,
        spike_duration=spec.spike_duration,
    )


def propagation_of(spec: TracesSpec) -> TracePropagation:
    """What the load reads of the scenario's ``traces:``: whether to send a traceparent, and
    the share sampled (max_spans and forward are the collector's)."""
    return TracePropagation(enabled=spec.enabled, sample=spec.sample)


def split_cap(total: int | None, parts: int) -> list[int | None]:
    """Share a request cap between ``parts`` processes (each gets at least 1)."""
    if total is None:
        return [None] * parts
    base, extra = divmod(total, parts)
    return [max(1, base + (1 if i < extra else 0)) for i in range(parts)]


def answer_edges(spec: SpecView) -> tuple[float, ...]:
    """Where the load's answer slots begin: every bound of the run's windows (t=0, each
    fault's start and end, the end of recovery), so each window gets its own sample."""
    edges = {0.0}
    for f in spec.faults:
        edges.update((f.at, f.end))
    if spec.faults:
        edges.add(max(f.end for f in spec.faults) + spec.recovery)
    return tuple(sorted(e for e in edges if 0.0 <= e < spec.duration))


def check_target(workload: Workload, options: LoadOptions, endpoints: dict[str, str]) -> None:
    """LoadError unless the component the workload sends to has an endpoint."""
    target = "agent" if workload != Workload.HTTP else options.http.target
    if target not in endpoints:
        known = ", ".join(sorted(endpoints)) or "none"
        raise LoadError(
            f"load workload {workload} needs component {target!r}; the stack has {known}"
        )


def base_config(
    run: RunView,
    spec: LoadSpec,
    options: LoadOptions,
    *,
    sink: str,
    base_urls: dict[str, str],
    t0_wall: float,
) -> LoadConfig:
    """The whole load's config (real seconds); workers get a copy with their share of the cap."""
    scale = run.clock.scale
    return LoadConfig(
        workload=Workload(spec.workload),
        shape=shape_of(spec),
        sink=sink,
        base_urls=base_urls,
        http=options.http,
        t0_wall=t0_wall,
        duration=run.scenario.spec.duration * scale,
        time_scale=scale,
        max_requests=spec.max_requests,
        request_timeout=options.request_timeout,
        task_timeout=options.task_timeout,
        think_time=options.think_time,
        answers=AnswerSampling(
            cap=spec.answers.cap,
            text_bytes=spec.answers.bytes,
            edges=answer_edges(run.scenario.spec),
            canned=spec.answers.canned,
        ),
        traces=options.traces,
    )


class LocustLoad:
    """Drives a workload through Locust in child processes; streams every request back."""

    name = "load"

    def __init__(self, spec: LoadSpec, options: LoadOptions | None = None) -> None:
        self.spec = spec
        self.options = options or LoadOptions()
        self.workload = Workload(spec.workload)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.sink: EventSink | None = None
        self._run: RunView | None = None
        self._logs: list[Path] = []
        self._stopped = False

    @property
    def stats(self) -> SinkStats:
        return self.sink.stats if self.sink is not None else SinkStats()

    # ---- Participant ---------------------------------------------------------------------
    def start(self, run: RunView) -> None:
        self._run = run
        endpoints = run.endpoints()
        check_target(self.workload, self.options, endpoints)
        timebase = TimeBase(run.clock, warmup=run.scenario.spec.warmup)
        # Records wait in the sink until the engine fixes t=0, so their t is exact.
        self.sink = EventSink(run.observations.add_requests, timebase.exact)
        self.sink.start()
        base = base_config(
            run,
            self.spec,
            self.options,
            sink=self.sink.address,
            base_urls=endpoints,
            t0_wall=timebase.expected_t0,
        )
        logs = run.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(base, logs)
        except OSError as exc:
            self.stop()
            raise LoadError(f"could not start Locust: {exc}") from exc
        run.event(
            EventKind.LOAD_STARTED,
            f"{self.workload}, {self.spec.users} users, {self.spec.shape}",
            workers=self.spec.workers,
            pids=[p.pid for p in self.procs],
        )

    def _spawn(self, base: LoadConfig, logs: Path) -> None:
        common = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--exit-code-on-error",
            "0",
        ]
        workers = self.spec.workers
        if workers == 0:
            self._popen([*common], base, logs / f"{self.options.log_name}.log")
            return
        port = _free_port()
        master = [
            *common,
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            str(int(WORKERS_TIMEOUT)),
        ]
        caps = split_cap(base.max_requests, workers)
        self._popen(master, base, logs / f"{self.options.log_name}-master.log")
        for i in range(workers):
            argv = [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
            cfg = base.model_copy(update={"max_requests": caps[i], "seed": i + 1})
            self._popen(argv, cfg, logs / f"{self.options.log_name}-worker{i}.log")

    def _popen(self, argv: list[str], cfg: LoadConfig, log_path: Path) -> None:
        assert self._run is not None
        ledger = self._run.ledger
        name = log_path.stem  # load, load-master, load-worker0 …
        tmp = self._run.run_dir / RUN_TMP_DIR
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            ENV_VAR: cfg.model_dump_json(),
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(tmp),
            # The intent reaches the ledger before the process exists: recover finds it by
            # this marker even if the harness dies before the PID is written.
            **ledger.add_spawn(name),
        }
        with log_path.open("ab") as fh:
            # Own session: a Ctrl-C at the terminal reaches the harness, which stops us by PID.
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self._run.run_dir,  # the run's folder, like every component's
            )
        self.procs.append(proc)
        self._logs.append(log_path)
        ledger.add_process(ProcessRecord(name, proc.pid, proc.pid, _create_time(proc.pid)))
        log.info("load process %d: %s", proc.pid, " ".join(argv[2:]))

    def stop(self) -> None:
        """Kill every Locust process by PID (TERM, then KILL), then drain the sink; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for p in self.procs:
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
            if self._run is not None:
                self._run.ledger.process_stopped(p.pid)
        if self.sink is not None:
            self.sink.stop()
        if self._run is not None:
            write_answers(self._run)
        self._report()

    def _report(self) -> None:
        run = self._run
        if run is None:
            return
        bad = [
            (p, path)
            for p, path in zip(self.procs, self._logs, strict=True)
            if p.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL)
        ]
        for p, path in bad:
            tail = _tail(path)
            run.error(f"load process {p.pid} exited with {p.returncode}: {tail}")
        s = self.stats
        run.event(
            EventKind.LOAD_STOPPED,
            f"{s.events} requests recorded",
            requests=s.events,
            bad_lines=s.bad_lines,
            max_lag=round(s.max_lag, 4),
            mean_lag=round(s.mean_lag, 4),
        )


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"(no log at {path})"
    return " | ".join(text[-lines:]) or f"(empty log {path})"


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()  # already gone; the record still lets recover skip it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
