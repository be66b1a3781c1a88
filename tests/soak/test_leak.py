"""The memory_leak injector against a live simulator: its RSS grows at the rate asked,
and the revert gives the memory back to the kernel."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
from tests.llmsim.conftest import Sim
from tests.llmsim.test_gpu_injectors import Ctx, cycle, sim_target

from faultday.core.targets import Revert, Target, TargetKind
from faultday.engine.recover import RecoverContext
from faultday.errors import InjectionError
from faultday.injectors.base import injector_registry
from faultday_wire.admin import LEAK_PATH

MIB = 2**20


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MIB


def held(sim: Sim) -> int:
    return int(httpx.get(sim.url + LEAK_PATH, timeout=5).json()["held_mib"])


def until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_the_leak_grows_at_its_rate_and_the_revert_releases_it(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm": sim_target(sim)}, lambda _: sim_target(start_sim()))
    before = rss_mib(sim.proc.pid)
    began = time.monotonic()
    inj, revert = cycle("memory_leak", ctx, ctx.target("llm"), {"rate": "1200MiB/min"})
    assert revert.action == "release"
    assert until(lambda: held(sim) >= 40, timeout=20)
    elapsed = time.monotonic() - began
    kept = held(sim)
    # 20 MiB a second, one MiB at a time: never ahead of the clock
    assert kept <= 20 * elapsed + 1
    grown = rss_mib(sim.proc.pid) - before
    assert grown >= kept - 8, (grown, kept)  # resident, not only reserved
    inj.revert(ctx, revert)
    assert held(sim) == 0
    assert until(lambda: rss_mib(sim.proc.pid) - before < 12, timeout=5), rss_mib(sim.proc.pid)
    inj.revert(ctx, revert)  # idempotent
    state = httpx.get(sim.url + LEAK_PATH, timeout=5).json()
    assert state == {
        "active": False,
        "held_mib": 0,
        "rate_mib_per_min": 0.0,
        "max_mib": 0,
        "released_mib": 0,
    }


def test_the_leak_stops_at_its_cap(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm": sim_target(sim)}, lambda _: sim_target(start_sim()))
    inj, revert = cycle("memory_leak", ctx, ctx.target("llm"), {"rate": "50MiB/s", "max": "16MiB"})
    assert until(lambda: held(sim) == 16, timeout=10)
    time.sleep(0.6)  # two more ticks: nothing beyond the cap
    assert held(sim) == 16
    inj.revert(ctx, revert)
    assert held(sim) == 0


def test_recover_releases_a_leak_the_run_left(
    start_sim: Callable[..., Sim], tmp_path: Path
) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm": sim_target(sim)}, lambda _: sim_target(start_sim()))
    inj, revert = cycle("memory_leak", ctx, ctx.target("llm"), {"rate": "600MiB/min"})
    assert until(lambda: held(sim) >= 5, timeout=10)
    # faultday recover: no stack driver, only the ledger's data
    inj.revert(RecoverContext(tmp_path), Revert.from_json(revert.to_json()))
    assert held(sim) == 0


def test_a_gone_simulator_needs_no_release(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = start_sim()
    ctx = Ctx(tmp_path, {"llm": sim_target(sim)}, lambda _: sim_target(start_sim()))
    inj, revert = cycle("memory_leak", ctx, ctx.target("llm"), {"rate": "60MiB/min"})
    sim.proc.terminate()
    sim.proc.wait(timeout=10)
    inj.revert(ctx, revert)  # the memory went with the process: nothing to do, no error


def test_only_the_simulator_has_a_leak_api(tmp_path: Path) -> None:
    inj = injector_registry().get("memory_leak")()
    redis = Target(name="redis", kind=TargetKind.COMPONENT, component_type="redis", url="x:1")
    ctx = Ctx(tmp_path, {"redis": redis}, lambda _: redis)
    with pytest.raises(InjectionError, match="has no leak API; supported: llmsim"):
        inj.prepare(ctx, redis, inj.parse({"rate": "1MiB/min"}), fault="f")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"rate": "fast"}, "is not <number><KiB|MiB|GiB>/<s|min|h>"),
        ({"rate": "1MiB/min", "max": "1TB"}, "is not <whole number><MiB|GiB>"),
        ({"rate": "100GiB/min"}, "the simulator would refuse this leak"),
        ({"rate": 0}, "the simulator would refuse this leak"),
    ],
)
def test_bad_params_say_what_is_valid(raw: dict[str, object], message: str) -> None:
    inj = injector_registry().get("memory_leak")()
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        inj.parse(raw)  # type: ignore[arg-type]
