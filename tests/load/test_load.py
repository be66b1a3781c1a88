"""Locust in a subprocess against real processes: records, streaming, bounds, workers, timing."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import httpx
import psutil
import pytest
from tests.conftest import wait_for

from faultday.core.events import FaultApplied
from faultday.core.loadconfig import HttpRequestSpec, Shape, ShapeSpec, users_at
from faultday.core.scenario import Scenario
from faultday.engine.participants import participants_for
from faultday.load.runner import LoadOptions, LocustLoad
from faultday.load.standalone import StandaloneRun
from faultday.observe.scrape import MetricsScraper
from faultday.observe.series import TimeSeriesWriter, derived


def scenario(duration: str, warmup: str = "1s", **load: object) -> Scenario:
    return Scenario.model_validate(
        {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": "load-test"},
            "spec": {"duration": duration, "warmup": warmup, "load": load},
        }
    )


def drive(run: StandaloneRun, parts: list, *, seconds: float, during=None) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Start the participants, fix t=0 after warm-up the way the engine does, stop them."""
    for p in parts:
        p.start(run)
    try:
        time.sleep(run.scenario.spec.warmup * run.clock.scale)
        run.clock.start()
        end = time.monotonic() + seconds
        if during is not None:
            during(run)
        time.sleep(max(0.0, end - time.monotonic()))
    finally:
        for p in reversed(parts):
            p.stop()


def test_http_load_streams_every_request_and_stops_by_pid(tmp_path: Path, ok_server: str) -> None:
    sc = scenario("3s", workload="http", users=4, spawn_rate=100, sample_interval="500ms")
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    parts = participants_for(sc)
    load = next(p for p in parts if isinstance(p, LocustLoad))
    drive(run, parts, seconds=3.0)
    rs = run.observations.requests
    assert len(rs) > 50 and all(r.ok and r.status == 200 and r.name == "GET /health" for r in rs)
    assert load.stats.events == len(rs) and load.stats.bad_lines == 0
    # Warm-up requests sit before t=0; nothing is recorded past the run's end.
    assert max(r.t for r in rs) < 3.0 + 1.0
    assert [r.t for r in rs] == sorted(r.t for r in rs)
    for p in load.procs:
        assert (p.returncode is not None and not psutil.pid_exists(p.pid)) or psutil.Process(
            p.pid
        ).status() == "zombie"
    assert not run.errors
    # Derived series and scraped metrics land in timeseries.csv.
    rows = list(csv.DictReader((tmp_path / "timeseries.csv").open()))
    names = {r["series"] for r in rows}
    assert {
        "load_rps",
        "load_e2e_p99",
        "load_error_rate",
        "ok_served_total",
        "faultday_scrape_up",
    } <= names
    served = [float(r["value"]) for r in rows if r["series"] == "ok_served_total"]
    assert served == sorted(served) and served[-1] > 0


def test_max_requests_bounds_the_load(tmp_path: Path, ok_server: str) -> None:
    sc = scenario("30s", warmup="0s", workload="http", users=4, spawn_rate=100, max_requests=40)
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    load = LocustLoad(sc.spec.load)
    load.start(run)
    try:
        run.clock.start()
        # Locust takes 1-4 s to start on a busy machine: wait for the cap, not for a time.
        wait_for(lambda: len(run.observations.requests) >= 40, 25.0, "40 requests")
        time.sleep(0.5)  # room for a 41st, which must never come
    finally:
        load.stop()
    assert len(run.observations.requests) == 40


def test_sse_stream_records_ttft_and_inter_token_latency(tmp_path: Path, llmsim: str) -> None:
    sc = scenario("3s", workload="http", users=2, spawn_rate=10)
    body = {
        "model": "sim-test",
        "stream": True,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello there"}],
    }
    opts = LoadOptions(
        http=HttpRequestSpec(
            target="llm", path="/v1/chat/completions", method="POST", body=body, stream=True
        )
    )
    run = StandaloneRun(sc, tmp_path, {"llm": llmsim})
    drive(run, [LocustLoad(sc.spec.load, opts)], seconds=3.0)
    rs = [r for r in run.observations.requests if r.ok]
    assert rs, run.observations.requests[:3]
    for r in rs:
        assert r.ttft is not None and 0 < r.ttft <= r.duration
        assert r.tokens >= 2 and len(r.itl) == r.tokens - 1
        assert r.ttft + sum(r.itl) <= r.duration + 1e-3


def test_injected_latency_shows_within_one_sample_interval(tmp_path: Path, ok_server: str) -> None:
    """200 ms added at a known time is visible in the e2e series of the very next interval."""
    interval = 0.5
    sc = scenario("5s", workload="http", users=4, spawn_rate=100, sample_interval="500ms")
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    at: list[float] = []

    def inject(r: StandaloneRun) -> None:
        time.sleep(2.0)
        httpx.get(f"{ok_server}/admin/delay?ms=200", timeout=2)
        at.append(r.clock.now())

    drive(run, [LocustLoad(sc.spec.load)], seconds=5.0, during=inject)
    series = derived(run.observations.requests, interval=interval, start=0.0, end=5.0)
    p50 = {s.t: s.value for s in series if s.name == "load_e2e_p50"}
    before = [v for t, v in p50.items() if t + interval <= at[0]]
    assert before and max(before) < 0.1
    # The first interval that starts after the injection already shows it in full.
    first_after = min(t for t in p50 if t >= at[0])
    assert first_after - at[0] <= interval
    assert p50[first_after] >= 0.2


@pytest.mark.slow
def test_workers_mode_runs_a_master_and_n_workers(tmp_path: Path, ok_server: str) -> None:
    sc = scenario("4s", warmup="3s", workload="http", users=4, spawn_rate=100, workers=2)
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    load = LocustLoad(sc.spec.load)
    drive(run, [load], seconds=4.0)
    assert len(load.procs) == 3
    assert load.stats.connections == 2  # one event stream per worker
    assert len(run.observations.requests) > 50 and not run.errors


def test_a_missing_target_is_a_clear_error(tmp_path: Path) -> None:
    sc = scenario("1s", workload="chat", users=1, spawn_rate=1)
    run = StandaloneRun(sc, tmp_path, {"llm": "http://127.0.0.1:1"})
    with pytest.raises(Exception, match="needs component 'agent'"):
        LocustLoad(sc.spec.load).start(run)


def test_shapes() -> None:
    const = ShapeSpec(kind=Shape.CONSTANT, users=8, spawn_rate=1)
    assert users_at(const, -1, duration=10) == 8 and users_at(const, 5, duration=10) == 8
    ramp = ShapeSpec(kind=Shape.RAMP, users=10, spawn_rate=1)
    assert [users_at(ramp, t, duration=10) for t in (0, 5, 10)] == [1, 5, 10]
    step = ShapeSpec(kind=Shape.STEP, users=12, spawn_rate=1, step_users=4, step_every=2)
    assert [users_at(step, t, duration=10) for t in (0, 1.9, 2, 4, 100)] == [4, 4, 8, 12, 12]
    spike = ShapeSpec(
        kind=Shape.SPIKE, users=2, spawn_rate=1, spike_users=20, spike_at=3, spike_duration=1
    )
    assert [users_at(spike, t, duration=10) for t in (2.9, 3, 3.9, 4)] == [2, 20, 20, 2]


def test_scraper_looks_again_as_soon_as_a_fault_acts(tmp_path: Path, ok_server: str) -> None:
    """A replica its fault kills may exit before the next round: the scraper listens to the
    run's fault_applied hook, from its start to its stop."""
    sc = scenario("30s", warmup="0s", workload="none")
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    scraper = MetricsScraper(interval=30.0)  # one round at start, the next 30 s later
    applied = FaultApplied("xid79", "gpu_xid", "agent", 1.0)
    scraper.start(run)
    try:
        wait_for(lambda: scraper.stats.rounds >= 1, 10, "the first scrape round")
        time.sleep(0.3)
        assert scraper.stats.rounds == 1
        assert run.events.fault_applied.fire(applied) == []
        wait_for(lambda: scraper.stats.rounds >= 2, 5, "a round right after the fault")
    finally:
        scraper.stop()
    assert len(run.events.fault_applied) == 0  # unsubscribed when it stopped


def test_scraper_parses_prometheus_text(tmp_path: Path, ok_server: str) -> None:
    sc = scenario("1s", workload="none")
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server, "redis": "redis://127.0.0.1:1"})
    httpx.get(f"{ok_server}/x", timeout=2)
    drive(run, [TimeSeriesWriter(interval=0.25), MetricsScraper(interval=0.25)], seconds=1.0)
    served = run.observations.samples_between(
        "ok_served_total", -10, 10, labels={"component": "agent"}
    )
    assert served and served[-1].value >= 1
    assert not run.observations.samples_between(
        "faultday_scrape_up", -10, 10, labels={"component": "redis"}
    )
