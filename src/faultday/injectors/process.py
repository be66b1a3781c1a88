"""Process faults: SIGKILL (with or without restart) and SIGSTOP…SIGCONT."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import ClassVar

import psutil
from pydantic import BaseModel, ConfigDict, Field

from faultday.core.targets import Revert, Target
from faultday.errors import InjectionError
from faultday.injectors.base import FaultContext, Injector, NoParams, RevertData

log = logging.getLogger(__name__)


def _identity(target: Target) -> tuple[int, float]:
    if target.pid is None:
        raise InjectionError(f"{target.name}: no process to signal (not run by the process driver)")
    try:
        return target.pid, psutil.Process(target.pid).create_time()
    except psutil.NoSuchProcess as exc:
        raise InjectionError(f"{target.name}: process {target.pid} is not running") from exc


def _same_process(pid: int, create_time: float) -> bool:
    """True while ``pid`` is still the process we meant (PIDs get recycled)."""
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.01
    except psutil.NoSuchProcess:
        return False


def _await_state(pid: int, *, stopped: bool, timeout: float = 2.0) -> bool:
    """Signals land asynchronously: wait (bounded) until the process shows the state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (psutil.Process(pid).status() == psutil.STATUS_STOPPED) == stopped:
                return True
        except psutil.NoSuchProcess:
            return not stopped
        time.sleep(0.005)
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # Components run in their own session, so the group holds the component and
    # its children (e.g. vLLM's EngineCore): a pause or kill reaches all of them.
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    if pgid == pid:
        os.killpg(pgid, sig)
    else:
        os.kill(pid, sig)


class KillParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    signal: str = Field(default="SIGKILL", pattern=r"^SIG(KILL|TERM|INT|QUIT|ABRT|SEGV)$")
    restart: bool = Field(
        default=True, description="restart the component when the fault window ends"
    )
    restart_timeout: float = Field(default=60.0, gt=0, description="seconds to wait for ready")


class PidData(RevertData):
    """The process a fault signals: its PID and start time (PIDs get recycled)."""

    pid: int
    create_time: float


class KillData(PidData):
    timeout: float = 60.0  # seconds to wait for the restarted component to be ready


class ProcessKill(Injector[KillParams, KillData]):
    """Kill a component's process group with a signal; optionally restart it at window end."""

    name: ClassVar[str] = "process_kill"
    summary: ClassVar[str] = "SIGKILL a component (restarted at window end unless restart: false)"
    Params = KillParams
    Data = KillData

    def prepare(
        self, ctx: FaultContext, target: Target, params: KillParams, *, fault: str
    ) -> Revert:
        pid, created = _identity(target)
        data = KillData(pid=pid, create_time=created, timeout=params.restart_timeout)
        action = "restart" if params.restart else "none"
        return self.record(target, fault=fault, action=action, data=data)

    def inject(self, ctx: FaultContext, target: Target, params: KillParams, revert: Revert) -> None:
        d = self.data(revert)
        pid, created = d.pid, d.create_time
        if not _same_process(pid, created):
            raise InjectionError(f"{target.name}: process {pid} is gone already")
        _signal_group(pid, signal.Signals[params.signal])
        log.info("sent %s to %s (pid %d)", params.signal, target.name, pid)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        if revert.action != "restart":
            return
        d = self.data(revert)
        pid, created = d.pid, d.create_time
        if _same_process(pid, created) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return  # the kill never landed (or a non-fatal signal): nothing to restart
        ctx.restart(revert.target, timeout=d.timeout)


class ProcessPause(Injector[NoParams, PidData]):
    """Freeze a component with SIGSTOP; SIGCONT at window end (the revert)."""

    name: ClassVar[str] = "process_pause"
    summary: ClassVar[str] = "SIGSTOP a component for the window, then SIGCONT"
    Params = NoParams
    Data = PidData

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        pid, created = _identity(target)
        data = PidData(pid=pid, create_time=created)
        return self.record(target, fault=fault, action="sigcont", data=data)

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        d = self.data(revert)
        pid, created = d.pid, d.create_time
        if not _same_process(pid, created):
            raise InjectionError(f"{target.name}: process {pid} is not running")
        _signal_group(pid, signal.SIGSTOP)
        if not _await_state(pid, stopped=True):
            raise InjectionError(f"{target.name}: process {pid} did not stop after SIGSTOP")
        log.info("paused %s (pid %d)", target.name, pid)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        d = self.data(revert)
        pid, created = d.pid, d.create_time
        if not _same_process(pid, created):
            log.info("%s: process %d is gone; nothing to resume", revert.target, pid)
            return
        _signal_group(pid, signal.SIGCONT)
        _await_state(pid, stopped=False)
        log.info("resumed %s (pid %d)", revert.target, pid)
