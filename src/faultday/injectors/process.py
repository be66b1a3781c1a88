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
from faultday.injectors.base import FaultContext, Injector, NoParams

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


class ProcessKill(Injector):
    """Kill a component's process group with a signal; optionally restart it at window end."""

    name: ClassVar[str] = "process_kill"
    summary: ClassVar[str] = "SIGKILL a component (restarted at window end unless restart: false)"
    Params: ClassVar[type[BaseModel]] = KillParams

    def prepare(
        self, ctx: FaultContext, target: Target, params: BaseModel, *, fault: str
    ) -> Revert:
        assert isinstance(params, KillParams)
        pid, created = _identity(target)
        return Revert(
            injector=self.name,
            fault=fault,
            target=target.name,
            action="restart" if params.restart else "none",
            data={"pid": pid, "create_time": created, "timeout": params.restart_timeout},
        )

    def inject(self, ctx: FaultContext, target: Target, params: BaseModel, revert: Revert) -> None:
        assert isinstance(params, KillParams)
        pid, created = int(revert.data["pid"]), float(revert.data["create_time"])  # type: ignore[arg-type]
        if not _same_process(pid, created):
            raise InjectionError(f"{target.name}: process {pid} is gone already")
        _signal_group(pid, signal.Signals[params.signal])
        log.info("sent %s to %s (pid %d)", params.signal, target.name, pid)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        if revert.action != "restart":
            return
        pid, created = int(revert.data["pid"]), float(revert.data["create_time"])  # type: ignore[arg-type]
        if _same_process(pid, created) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return  # the kill never landed (or a non-fatal signal): nothing to restart
        ctx.restart(revert.target, timeout=float(revert.data.get("timeout", 60.0)))  # type: ignore[arg-type]


class ProcessPause(Injector):
    """Freeze a component with SIGSTOP; SIGCONT at window end (the revert)."""

    name: ClassVar[str] = "process_pause"
    summary: ClassVar[str] = "SIGSTOP a component for the window, then SIGCONT"
    Params: ClassVar[type[BaseModel]] = NoParams

    def prepare(
        self, ctx: FaultContext, target: Target, params: BaseModel, *, fault: str
    ) -> Revert:
        pid, created = _identity(target)
        return Revert(
            injector=self.name,
            fault=fault,
            target=target.name,
            action="sigcont",
            data={"pid": pid, "create_time": created},
        )

    def inject(self, ctx: FaultContext, target: Target, params: BaseModel, revert: Revert) -> None:
        pid, created = int(revert.data["pid"]), float(revert.data["create_time"])  # type: ignore[arg-type]
        if not _same_process(pid, created):
            raise InjectionError(f"{target.name}: process {pid} is not running")
        _signal_group(pid, signal.SIGSTOP)
        if not _await_state(pid, stopped=True):
            raise InjectionError(f"{target.name}: process {pid} did not stop after SIGSTOP")
        log.info("paused %s (pid %d)", target.name, pid)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        pid, created = int(revert.data["pid"]), float(revert.data["create_time"])  # type: ignore[arg-type]
        if not _same_process(pid, created):
            log.info("%s: process %d is gone; nothing to resume", revert.target, pid)
            return
        _signal_group(pid, signal.SIGCONT)
        _await_state(pid, stopped=False)
        log.info("resumed %s (pid %d)", revert.target, pid)
