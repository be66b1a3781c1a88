"""Sample each component's resident memory and open file descriptors (``load.shape: soak``).

Every ``interval`` scenario seconds the sampler reads, with psutil, the process the
stack driver reports for each component and all of its children (a real vLLM keeps
its memory in the EngineCore child): the summed RSS in bytes (``proc_rss_bytes``)
and the summed open FDs (``proc_open_fds``), labelled with the component. They go
into the run's samples, so ``timeseries.csv`` and the drift check read them like
any scraped metric.

Only drivers whose ``target()`` names a host PID are sampled: the process driver,
and docker where the harness may read the container's host process; kubernetes
pods have no PID here, and ``procs.started`` lists such components as
``without_pid``. A component that restarts is followed to its new PID.
"""

from __future__ import annotations

import logging
import threading
import time

import psutil

from faultday.core.events import FaultApplied, FaultReverted
from faultday.core.protocols import RunView
from faultday.core.records import Sample
from faultday.core.timebase import TimeBase
from faultday.core.vocab import EventKind
from faultday.errors import FaultdayError

log = logging.getLogger(__name__)

RSS = "proc_rss_bytes"
FDS = "proc_open_fds"
MIN_REAL_INTERVAL = 0.05  # real seconds; a time-scaled run may ask for less


def component_names(run: RunView) -> list[str]:
    """The stack's components (edges, ``a->b``, have no process of their own)."""
    if run.stack is None:
        return []
    return [n for n in run.stack.target_names() if "->" not in n]


def tree_figures(proc: psutil.Process) -> tuple[int, int | None]:
    """(RSS bytes, open FDs) of a process and all its children; FDs None when unreadable.

    NoSuchProcess when the process itself is gone (a zombie included): its children,
    orphaned, are not the component any more.
    """
    if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
        raise psutil.NoSuchProcess(proc.pid)  # exited, or its PID names another process
    children = proc.children(recursive=True)
    rss, fds, readable = _figures(proc)  # the process itself: NoSuchProcess propagates
    for child in children:
        try:
            c_rss, c_fds, c_readable = _figures(child)
        except psutil.NoSuchProcess:
            continue  # a child that exited between the listing and the read
        rss, fds, readable = rss + c_rss, fds + c_fds, readable and c_readable
    return rss, fds if readable else None


def _figures(p: psutil.Process) -> tuple[int, int, bool]:
    with p.oneshot():
        rss = p.memory_info().rss
        try:
            return rss, p.num_fds(), True
        except psutil.AccessDenied:
            return rss, 0, False  # another user's process (a container's): RSS only


class ProcessSampler:
    """A thread that samples every component's process tree at a fixed interval."""

    name = "procs"

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self.rounds = 0
        self.gone = 0  # reads of a process that had exited (a restart, a kill)
        self._stop = threading.Event()
        self._stale = threading.Event()  # a fault acted: resolve the PIDs again
        self._thread: threading.Thread | None = None
        self._run: RunView | None = None
        self._procs: dict[str, psutil.Process] = {}
        self._known: set[str] = set()

    def start(self, run: RunView) -> None:
        self._run = run
        self._timebase = TimeBase(run.clock, warmup=run.scenario.spec.warmup)
        self._real = max(MIN_REAL_INTERVAL, run.clock.wall(self.interval))
        self._names = component_names(run)
        self._resolve()
        self._known = set(self._procs)  # components with a PID of their own
        without = sorted(set(self._names) - self._known)
        run.event(
            EventKind.PROCS_STARTED,
            f"{len(self._procs)} components every {self.interval:g}s",
            components=sorted(self._procs),
            without_pid=without,
        )
        self._thread = threading.Thread(target=self._loop, name="procs", daemon=True)
        self._thread.start()
        # A fault or its revert may restart a component (a new PID).
        run.events.fault_applied.add_listener(self.fault_acted)
        run.events.fault_reverted.add_listener(self.fault_acted)

    def _resolve(self) -> None:
        """Look up each component's PID through the driver (a restart changes it)."""
        assert self._run is not None
        for name in self._names:
            try:
                pid = self._run.target(name).pid
            except FaultdayError as exc:
                log.debug("no target %s: %s", name, exc)
                continue
            known = self._procs.get(name)
            if pid is None or (known is not None and known.pid == pid and known.is_running()):
                continue
            try:
                self._procs[name] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                self._procs.pop(name, None)

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            nxt = max(nxt + self._real, time.monotonic())  # never queue up missed rounds
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def sample_once(self) -> None:
        run = self._run
        if run is None:
            return
        # A component that had a PID and lost it (restarting) is looked up every round.
        if self._stale.is_set() or self._known - set(self._procs):
            self._stale.clear()
            self._resolve()
        samples: list[Sample] = []
        lost = False
        for comp, proc in list(self._procs.items()):
            t = round(self._timebase.at(time.time()), 4)
            try:
                rss, fds = tree_figures(proc)
            except psutil.NoSuchProcess:
                self.gone += 1
                lost = True
                continue  # a gap in the series; the PID is looked up again next round
            except psutil.AccessDenied as exc:
                log.debug("cannot read %s (pid %d): %s", comp, proc.pid, exc)
                continue
            labels = (("component", comp),)
            samples.append(Sample(t=t, name=RSS, value=float(rss), labels=labels))
            if fds is not None:
                samples.append(Sample(t=t, name=FDS, value=float(fds), labels=labels))
        if lost:
            self._stale.set()
        self.rounds += 1
        run.observations.add_samples(samples)

    def fault_acted(self, _event: FaultApplied | FaultReverted) -> None:
        """A fault or its revert acted (a restart, a kill): look the PIDs up again before the
        next round. The run's listener, on the engine's thread: it only sets a flag."""
        self._stale.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        run, self._run = self._run, None
        if run is not None:
            run.events.fault_applied.remove_listener(self.fault_acted)
            run.events.fault_reverted.remove_listener(self.fault_acted)
            run.event(
                EventKind.PROCS_STOPPED, f"{self.rounds} rounds", rounds=self.rounds, gone=self.gone
            )
