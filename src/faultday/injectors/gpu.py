"""GPU faults on an LLM component: loss, hang, throttle, KV-cache pressure.

Two kinds of target:

* ``llmsim`` — the simulator's fault admin API (``POST /admin/faults``), which
  reproduces what vLLM does when its GPU fails;
* ``vllm`` — a real server: ``gpu_loss`` SIGKILLs its ``VLLM::EngineCore``
  child (exactly what an Xid 79 does to it), ``gpu_hang`` SIGSTOPs that child
  and SIGCONTs it at window end. The target's PID is the API server's under the
  process driver, or the container's init under the docker driver on a local
  engine: a container's processes are processes of this host too, so EngineCore
  is found among its descendants and signalled here by its host PID.

A lost GPU does not come back by itself: the revert of ``gpu_loss`` restarts the
component through the stack driver (``ctx.restart``) and waits until it serves.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from typing import ClassVar, TypeVar

import httpx
import psutil
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from faultday.core.targets import Revert, Target
from faultday.errors import FaultdayError, InjectionError, RevertError
from faultday.injectors.base import FaultContext, Injector, NoParams, RevertData
from faultday_wire.admin import FaultKind, FaultSpec

log = logging.getLogger(__name__)

LLMSIM = "llmsim"
VLLM = "vllm"
ADMIN_TIMEOUT_S = 5.0
ENGINE_CORE_MARK = "EngineCore"


class GpuLossParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    xid: int = Field(default=79, ge=1, le=999, description="Xid the simulator logs and dies of")
    oom: bool = Field(default=False, description="die of CUDA OOM instead of an Xid (simulator)")
    restart: bool = Field(default=True, description="restart the component at window end")
    restart_timeout: float = Field(default=120.0, gt=0, description="seconds to wait for ready")


class ThrottleParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: float = Field(default=3.0, ge=1.0, description="every engine step takes factorx longer")


class KvPressureParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: float = Field(default=0.25, gt=0, le=1.0, description="usable KV blocks x factor")


# --- helpers -------------------------------------------------------------------------------------
def admin_base(target: Target) -> str:
    base = target.admin_url or target.url
    if not base:
        raise InjectionError(f"{target.name}: no admin_url or url to reach the simulator")
    if "://" not in base:
        base = "http://" + base
    return base.rstrip("/")


def _spec(target: str, **fields: object) -> FaultSpec:
    """The simulator's own body model: a value it would refuse fails here, before the call."""
    try:
        return FaultSpec.model_validate(fields)
    except ValidationError as exc:
        raise InjectionError(f"{target}: the simulator would refuse this fault: {exc}") from exc


def _post_fault(base: str, spec: FaultSpec, target: str) -> None:
    # Only the fields given, as the body always was: the simulator's defaults stay its own.
    body = spec.model_dump(mode="json", exclude_unset=True)
    try:
        resp = httpx.post(f"{base}/admin/faults", json=body, timeout=ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InjectionError(f"{target}: fault admin API unreachable at {base}: {exc}") from exc
    if resp.status_code != 200:
        raise InjectionError(
            f"{target}: {base}/admin/faults answered {resp.status_code}: {resp.text[:300]}"
        )


def _delete_fault(base: str, fault_id: str, target: str) -> None:
    try:
        resp = httpx.delete(f"{base}/admin/faults/{fault_id}", timeout=ADMIN_TIMEOUT_S)
    except httpx.ConnectError:
        log.info("%s: simulator not listening; fault %s went with it", target, fault_id)
        return
    except httpx.HTTPError as exc:
        raise RevertError(f"{target}: could not clear fault {fault_id}: {exc}") from exc
    if resp.status_code == 404 and _no_such_fault(resp):
        # Idempotent revert: never injected, cleared already, or gone with a restart. Only
        # the simulator's own answer counts: a 404 from a wrong path or a proxy in front
        # says nothing of the fault, and taking it as cleared would leave the fault on.
        log.info("%s: fault %s is not active; nothing to clear", target, fault_id)
        return
    if resp.status_code != 200:
        raise RevertError(f"{target}: clearing fault {fault_id} answered {resp.status_code}")


def _no_such_fault(resp: httpx.Response) -> bool:
    """The simulator's 404 for a fault id it does not hold (its admin API's error shape)."""
    try:
        error = resp.json().get("error")
    except ValueError:
        return False
    return isinstance(error, dict) and error.get("type") == "NotFoundError"


def _engine_state(base: str) -> str | None:
    """The simulator's engine state (running/hung/dead), or None when unreachable."""
    try:
        resp = httpx.get(f"{base}/admin/faults", timeout=ADMIN_TIMEOUT_S)
        return str(resp.json().get("engine")) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def find_engine_core(api_pid: int) -> psutil.Process:
    """The ``VLLM::EngineCore`` process under a vLLM API server."""
    try:
        children = psutil.Process(api_pid).children(recursive=True)
    except psutil.NoSuchProcess as exc:
        raise InjectionError(f"vLLM API server process {api_pid} is not running") from exc
    for child in children:
        try:
            if ENGINE_CORE_MARK in child.name() or ENGINE_CORE_MARK in " ".join(child.cmdline()):
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise InjectionError(f"no {ENGINE_CORE_MARK} process under pid {api_pid}")


def _same_process(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return bool(abs(proc.create_time() - create_time) < 0.01 and proc.status() != "zombie")
    except psutil.NoSuchProcess:
        return False


def _signal(pid: int, create_time: float, sig: signal.Signals) -> bool:
    if not _same_process(pid, create_time):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _component_type(target: Target, allowed: frozenset[str]) -> str:
    kind = target.component_type
    if kind not in allowed:
        raise InjectionError(
            f"{target.name}: component type {kind!r} has no GPU to break here; "
            f"supported: {', '.join(sorted(allowed))}"
        )
    return kind


def _engine_data(target: Target) -> dict[str, JsonValue]:
    if target.pid is None:
        raise InjectionError(
            f"{target.name}: no pid: a real vLLM's EngineCore is found among the processes "
            "of this host (the process driver, or the docker driver on a local engine); "
            "on a remote engine use container_kill or container_pause instead"
        )
    core = find_engine_core(target.pid)
    return {"mode": VLLM, "engine_pid": core.pid, "engine_create_time": core.create_time()}


def _admin_data(target: Target) -> dict[str, JsonValue]:
    return {"mode": LLMSIM, "admin": admin_base(target), "fault_id": "fd-" + uuid.uuid4().hex[:12]}


def _current_target(ctx: FaultContext, name: str) -> Target | None:
    """The component as the stack driver knows it now (a restart may move it), if live."""
    if not ctx.live:
        return None
    try:
        return ctx.target(name)
    except FaultdayError:
        return None


class GpuData(RevertData):
    """How to undo a GPU fault: the simulator's fault id, or vLLM's EngineCore process."""

    mode: str  # llmsim or vllm
    admin: str = ""  # llmsim: the fault admin API
    fault_id: str = ""
    engine_pid: int = 0  # vllm: the EngineCore, and its start time (PIDs get recycled)
    engine_create_time: float = 0.0
    timeout: float = 120.0  # gpu_loss: seconds to wait for the restarted component


def _gpu_data(target: Target, kind: str, **extra: JsonValue) -> GpuData:
    base = _admin_data(target) if kind == LLMSIM else _engine_data(target)
    return GpuData.model_validate({**base, **extra})


AdminP = TypeVar("AdminP", bound=ThrottleParams | KvPressureParams)


# --- the injectors -------------------------------------------------------------------------------
class GpuLoss(Injector[GpuLossParams, GpuData]):
    """The GPU falls off the bus (Xid 79 and kin): the engine dies; restarted at window end."""

    name: ClassVar[str] = "gpu_loss"
    summary: ClassVar[str] = "GPU lost (Xid/OOM): engine dies, in-flight requests fail"
    Params = GpuLossParams
    Data = GpuData
    component_types: ClassVar[frozenset[str] | None] = frozenset({LLMSIM, VLLM})

    def prepare(
        self, ctx: FaultContext, target: Target, params: GpuLossParams, *, fault: str
    ) -> Revert:
        kind = _component_type(target, frozenset({LLMSIM, VLLM}))
        data = _gpu_data(target, kind, timeout=params.restart_timeout)
        action = "restart" if params.restart else "none"
        return self.record(target, fault=fault, action=action, data=data)

    def inject(
        self, ctx: FaultContext, target: Target, params: GpuLossParams, revert: Revert
    ) -> None:
        data = self.data(revert)
        if data.mode == LLMSIM:
            spec = (
                _spec(target.name, kind=FaultKind.OOM, id=data.fault_id)
                if params.oom
                else _spec(target.name, kind=FaultKind.XID, xid=params.xid, id=data.fault_id)
            )
            _post_fault(data.admin, spec, target.name)
            log.info("%s: GPU lost (%s)", target.name, "oom" if params.oom else f"Xid {params.xid}")
            return
        pid, created = data.engine_pid, data.engine_create_time
        if not _signal(pid, created, signal.SIGKILL):
            raise InjectionError(f"{target.name}: EngineCore {pid} is gone already")
        log.info("%s: SIGKILL to EngineCore pid %d (GPU loss)", target.name, pid)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        if revert.action != "restart":
            return
        if self._serving(ctx, revert):
            return  # the fault never landed, or the component was restarted already
        # During recover the context decides: moot when the stack is being stopped,
        # a failure (the replica stays dead) when its processes are kept.
        ctx.restart(revert.target, timeout=self.data(revert).timeout)

    def _serving(self, ctx: FaultContext, revert: Revert) -> bool:
        data = self.data(revert)
        current = _current_target(ctx, revert.target)
        if data.mode == LLMSIM:
            admins = {data.admin}
            if current is not None and (current.admin_url or current.url):
                admins.add(admin_base(current))
            return any(_engine_state(a) in ("running", "hung") for a in admins)
        if _same_process(data.engine_pid, data.engine_create_time):
            return True  # the kill never landed
        if current is None or current.pid is None:
            return False
        try:
            return bool(find_engine_core(current.pid).pid != data.engine_pid)
        except InjectionError:
            return False


class GpuHang(Injector[NoParams, GpuData]):
    """The GPU stops making progress while the server still answers health checks."""

    name: ClassVar[str] = "gpu_hang"
    summary: ClassVar[str] = (
        "GPU hang: tokens stop, /health stays 200 (SIGSTOP of a real EngineCore)"
    )
    Params = NoParams
    Data = GpuData
    component_types: ClassVar[frozenset[str] | None] = frozenset({LLMSIM, VLLM})

    def prepare(self, ctx: FaultContext, target: Target, params: NoParams, *, fault: str) -> Revert:
        kind = _component_type(target, frozenset({LLMSIM, VLLM}))
        action = "clear" if kind == LLMSIM else "sigcont"
        return self.record(target, fault=fault, action=action, data=_gpu_data(target, kind))

    def inject(self, ctx: FaultContext, target: Target, params: NoParams, revert: Revert) -> None:
        data = self.data(revert)
        if data.mode == LLMSIM:
            spec = _spec(target.name, kind=FaultKind.HANG, id=data.fault_id)
            _post_fault(data.admin, spec, target.name)
        else:
            pid, created = data.engine_pid, data.engine_create_time
            if not _signal(pid, created, signal.SIGSTOP):
                raise InjectionError(f"{target.name}: EngineCore {pid} is not running")
        log.info("%s: GPU hang", target.name)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        data = self.data(revert)
        if data.mode == LLMSIM:
            _delete_fault(data.admin, data.fault_id, revert.target)
            return
        if _signal(data.engine_pid, data.engine_create_time, signal.SIGCONT):
            log.info("%s: EngineCore resumed", revert.target)


class _AdminFault(Injector[AdminP, GpuData]):
    """A simulator-only fault posted to /admin/faults and cleared by id."""

    kind: ClassVar[FaultKind]
    Data = GpuData
    component_types: ClassVar[frozenset[str] | None] = frozenset({LLMSIM})

    def prepare(self, ctx: FaultContext, target: Target, params: AdminP, *, fault: str) -> Revert:
        _component_type(target, frozenset({LLMSIM}))
        return self.record(target, fault=fault, action="clear", data=_gpu_data(target, LLMSIM))

    def inject(self, ctx: FaultContext, target: Target, params: AdminP, revert: Revert) -> None:
        data = self.data(revert)
        spec = _spec(target.name, kind=self.kind, id=data.fault_id, factor=float(params.factor))
        _post_fault(data.admin, spec, target.name)
        log.info("%s: %s %s", target.name, self.kind, spec.factor)

    def revert(self, ctx: FaultContext, revert: Revert) -> None:
        data = self.data(revert)
        _delete_fault(data.admin, data.fault_id, revert.target)


class GpuThrottle(_AdminFault[ThrottleParams]):
    """Thermal or power capping: every engine step (so inter-token latency) x factor."""

    name: ClassVar[str] = "gpu_throttle"
    summary: ClassVar[str] = "GPU clocks throttled: inter-token latency x factor (simulator)"
    Params = ThrottleParams
    kind: ClassVar[FaultKind] = FaultKind.THROTTLE


class KvPressure(_AdminFault[KvPressureParams]):
    """Usable KV-cache blocks x factor: preemptions, recompute and latency spikes."""

    name: ClassVar[str] = "kv_pressure"
    summary: ClassVar[str] = (
        "KV-cache capacity x factor: preemptions and latency spikes (simulator)"
    )
    Params = KvPressureParams
    kind: ClassVar[FaultKind] = FaultKind.KV_SHRINK
