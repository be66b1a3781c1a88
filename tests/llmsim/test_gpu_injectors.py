"""The gpu_* injectors against a live simulator and against a real process tree shaped like vLLM."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from tests.llmsim.conftest import Sim

from faultday.core.targets import Revert, Target, TargetKind
from faultday.engine.recover import RecoverContext
from faultday.errors import FaultdayError, InjectionError
from faultday.injectors.base import Injector, injector_registry
from faultday.injectors.gpu import find_engine_core


@dataclass
class Ctx:
    """A FaultContext whose ``restart`` really restarts the component (a stack-driver stand-in)."""

    run_dir: Path
    targets: dict[str, Target]
    restarter: Callable[[str], Target]
    live: bool = True
    restarts: list[str] = field(default_factory=list)

    def target(self, name: str) -> Target:
        return self.targets[name]

    def restart(self, component: str, *, timeout: float) -> None:
        self.restarts.append(component)
        self.targets[component] = self.restarter(component)


def sim_target(sim: Sim) -> Target:
    return Target(
        name="llm-primary",
        kind=TargetKind.COMPONENT,
        component_type="llmsim",
        url=sim.url,
        admin_url=sim.url,
        pid=sim.proc.pid,
    )


def cycle(name: str, ctx: Ctx, target: Target, raw: dict[str, object]) -> tuple[Injector, Revert]:
    """prepare → (ledger round-trip, as the engine does) → inject."""
    inj = injector_registry().get(name)()
    params = inj.parse(raw)  # type: ignore[arg-type]
    revert = inj.prepare(ctx, target, params, fault="f1")
    revert = Revert.from_json(revert.to_json())  # reverts are plain data
    inj.inject(ctx, target, params, revert)
    return inj, revert


def test_gpu_loss_on_llmsim_dies_then_revert_restarts_once(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm-primary": sim_target(sim)}, lambda _: sim_target(start_sim()))
    inj, revert = cycle("gpu_loss", ctx, ctx.target("llm-primary"), {"xid": 48})
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503
    assert "NVRM: Xid (PCI:0000:01:00): 48" in sim.log_text()
    assert sim.wait_exit(timeout=5) == 0  # as vLLM: a clean exit after engine death
    inj.revert(ctx, revert)
    assert ctx.restarts == ["llm-primary"]
    new = ctx.target("llm-primary")
    assert httpx.get(f"{new.url}/health", timeout=5).status_code == 200
    inj.revert(ctx, revert)  # idempotent: the component serves again, no second restart
    assert ctx.restarts == ["llm-primary"]


def test_gpu_loss_revert_during_recover_is_moot_when_the_stack_stops_and_fails_when_kept(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm-primary": sim_target(sim)}, lambda _: sim_target(start_sim()))
    inj, revert = cycle("gpu_loss", ctx, ctx.target("llm-primary"), {"oom": True})
    # recover: the stack is stopped next, so there is nothing to restart.
    inj.revert(RecoverContext(run_dir=tmp_path, stack_stops=True), revert)
    # recover --keep-processes: the replica would stay dead; that is a failed revert.
    with pytest.raises(FaultdayError, match="llm-primary cannot be restarted"):
        inj.revert(RecoverContext(run_dir=tmp_path, stack_stops=False), revert)
    assert ctx.restarts == []


def test_hang_throttle_kv_pressure_on_llmsim_revert_by_id(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    sim = start_sim()
    target = sim_target(sim)
    ctx = Ctx(tmp_path, {"llm-primary": target}, lambda _: target)
    applied = [
        cycle("gpu_hang", ctx, target, {}),
        cycle("gpu_throttle", ctx, target, {"factor": 4}),
        cycle("kv_pressure", ctx, target, {"factor": 0.5}),
    ]
    faults = httpx.get(f"{sim.url}/admin/faults", timeout=5).json()
    assert faults["engine"] == "hung"
    assert sorted(f["kind"] for f in faults["faults"]) == ["hang", "kv_shrink", "throttle"]
    assert httpx.get(f"{sim.url}/admin/stats", timeout=5).json()["kv_capacity_blocks"] == 4096
    for inj, revert in reversed(applied):
        inj.revert(ctx, revert)
        inj.revert(ctx, revert)  # idempotent
    faults = httpx.get(f"{sim.url}/admin/faults", timeout=5).json()
    assert faults == {**faults, "engine": "running", "faults": []}
    resp = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=5)
    assert resp.status_code == 200


def test_gpu_throttle_refuses_a_real_vllm(tmp_path: Path) -> None:
    target = Target(name="llm", kind=TargetKind.COMPONENT, component_type="vllm", pid=os.getpid())
    ctx = Ctx(tmp_path, {"llm": target}, lambda _: target)
    inj = injector_registry().get("gpu_throttle")()
    with pytest.raises(InjectionError, match="supported: llmsim"):
        inj.prepare(ctx, target, inj.parse({"factor": 2}), fault="f")


# --- the real-vLLM path, on a process tree shaped like vLLM's ---------------------------------
FAKE_VLLM = (
    "import subprocess, time\n"
    "core = subprocess.Popen(['bash', '-c', 'exec -a VLLM::EngineCore sleep 120'])\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[Callable[[], Target]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> Target:
        proc = subprocess.Popen(
            [sys.executable, "-c", FAKE_VLLM, str(tmp_path)], start_new_session=True
        )
        procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(InjectionError):
                find_engine_core(proc.pid)
                break
            time.sleep(0.05)
        return Target(name="llm", kind=TargetKind.COMPONENT, component_type="vllm", pid=proc.pid)

    try:
        yield start
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def test_real_vllm_hang_is_sigstop_of_engine_core(
    fake_vllm: Callable[[], Target], tmp_path: Path
) -> None:
    target = fake_vllm()
    core = find_engine_core(target.pid or 0)
    ctx = Ctx(tmp_path, {"llm": target}, lambda _: target)
    inj, revert = cycle("gpu_hang", ctx, target, {})
    assert revert.data["engine_pid"] == core.pid
    assert wait_status(core, stopped=True)
    assert psutil.Process(target.pid or 0).status() != psutil.STATUS_STOPPED  # API server runs
    inj.revert(ctx, revert)
    inj.revert(ctx, revert)
    assert wait_status(core, stopped=False)


def wait_status(proc: psutil.Process, *, stopped: bool) -> bool:
    """Signals land asynchronously: poll the state briefly."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if (proc.status() == psutil.STATUS_STOPPED) == stopped:
            return True
        time.sleep(0.01)
    return False


def test_real_vllm_loss_is_sigkill_of_engine_core_and_revert_restarts(
    fake_vllm: Callable[[], Target], tmp_path: Path
) -> None:
    target = fake_vllm()
    core = find_engine_core(target.pid or 0)
    ctx = Ctx(tmp_path, {"llm": target}, lambda _: fake_vllm())
    inj, revert = cycle("gpu_loss", ctx, target, {})
    deadline = time.monotonic() + 5  # the fake API server never reaps it: a zombie is dead
    while core.is_running() and core.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "EngineCore survived SIGKILL"
        time.sleep(0.02)
    assert psutil.Process(target.pid or 0).is_running()
    inj.revert(ctx, revert)
    assert ctx.restarts == ["llm"]
    inj.revert(ctx, revert)  # the new EngineCore is up: no second restart
    assert ctx.restarts == ["llm"]


def test_a_404_that_is_not_the_simulators_is_a_failed_revert(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    """Only the simulator's own 'no fault with id' clears a revert: a 404 from whatever else
    answers at the admin address (a wrong path, a proxy in front) says nothing of the fault."""

    class NotHere(http.server.BaseHTTPRequestHandler):
        def do_DELETE(self) -> None:
            self.send_response(404)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"404 page not found")

        def log_message(self, *args: object) -> None:
            pass

    sim = start_sim()
    target = sim_target(sim)
    ctx = Ctx(tmp_path, {"llm-primary": target}, lambda _: target)
    inj, revert = cycle("gpu_throttle", ctx, target, {"factor": 4})
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotHere)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        admin = f"http://127.0.0.1:{other.server_port}"
        elsewhere = dataclasses.replace(revert, data={**revert.data, "admin": admin})
        with pytest.raises(FaultdayError, match="answered 404"):
            inj.revert(ctx, elsewhere)
    finally:
        other.shutdown()
        other.server_close()
    assert [f["kind"] for f in httpx.get(f"{sim.url}/admin/faults", timeout=5).json()["faults"]]
    inj.revert(ctx, revert)  # the simulator's own answer: cleared, and again idempotent
    inj.revert(ctx, revert)
    assert httpx.get(f"{sim.url}/admin/faults", timeout=5).json()["faults"] == []
