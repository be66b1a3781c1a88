"""bench/load: Locust against the agent runtime's cheapest endpoint (GET /health).

Starts a real redis-server and the agent runtime (its other dependencies are
not needed for /health), then drives the `http` workload through the same
participants a run uses (Locust subprocess(es) + event sink + /metrics scraper
+ timeseries writer) and reports what the harness received and how late.

    .venv/bin/python bench/load/bench_load.py --users 32 --workers 1 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from faultday.core.scenario import Scenario
from faultday.load.runner import LocustLoad
from faultday.load.standalone import StandaloneRun
from faultday.observe.scrape import MetricsScraper
from faultday.observe.series import TimeSeriesWriter, derived

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="faultday-bench-load-"))
    rport, aport = free_port(), free_port()
    procs = [subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)]
    dummy = "http://127.0.0.1:1"
    agent = [sys.executable, "-m", "faultday_refstack.agent", "--port", str(aport),
             "--config", str(ROOT / "stack/agent.yaml"), "--redis", f"redis://127.0.0.1:{rport}",
             "--llm-primary", dummy, "--llm-backup", dummy, "--embedder", dummy, "--qdrant", dummy,
             "--tools", dummy, "--log-level", "warning",
             "--traces", str(work / "traces.jsonl"), "--audit", str(work / "audit.jsonl")]
    procs.append(subprocess.Popen(agent, stdout=(work / "agent.log").open("wb"),
                                  stderr=subprocess.STDOUT))
    try:
        base = f"http://127.0.0.1:{aport}"
        wait_http(f"{base}/health")
        sc = Scenario.model_validate({
            "apiVersion": "faultday/v1", "kind": "Scenario", "metadata": {"name": "bench-load"},
            "spec": {"duration": f"{a.seconds}s", "warmup": "3s" if a.workers else "2s",
                     "load": {"workload": "http", "users": a.users, "spawn_rate": 1000,
                              "workers": a.workers, "sample_interval": a.interval}},
        })
        run = StandaloneRun(sc, work, {"agent": base})
        load = LocustLoad(sc.spec.load)
        scraper = MetricsScraper(interval=sc.spec.load.sample_interval)
        parts = [TimeSeriesWriter(interval=sc.spec.load.sample_interval), scraper, load]
        for p in parts:
            p.start(run)
        time.sleep(sc.spec.warmup)
        run.clock.start()
        time.sleep(a.seconds)
        for p in reversed(parts):
            p.stop()
        rs = [r for r in run.observations.requests if 0 <= r.t < a.seconds]
        # Skip the first 2 s (users still spawning) for the steady rate.
        steady = [r for r in rs if r.t >= 2.0]
        series = derived(rs, interval=1.0, start=0.0, end=a.seconds)
        rps = [s.value for s in series if s.name == "load_rps"][2:]
        result = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cpus, shared",
            "command": " ".join(sys.argv),
            "users": a.users, "workers": a.workers, "seconds": a.seconds,
            "requests": len(rs),
            "rps_steady": round(len(steady) / max(1e-9, a.seconds - 2.0), 1),
            "rps_per_second_min": round(min(rps), 1) if rps else 0,
            "rps_per_second_max": round(max(rps), 1) if rps else 0,
            "errors": sum(1 for r in rs if not r.ok),
            "e2e_p50_ms": round(sorted(r.duration for r in rs)[len(rs) // 2] * 1000, 2) if rs else None,
            "sink_events": load.stats.events,
            "sink_bad_lines": load.stats.bad_lines,
            "sink_lag_mean_ms": round(load.stats.mean_lag * 1000, 2),
            "sink_lag_max_ms": round(load.stats.max_lag * 1000, 2),
            "scrape_rounds": scraper.stats.rounds,
            "scrape_rounds_expected": int((a.seconds + sc.spec.warmup) / sc.spec.load.sample_interval),
            "scrape_max_late_ms": round(scraper.stats.max_late * 1000, 2),
            "scrape_max_round_ms": round(scraper.stats.max_round * 1000, 2),
            "harness_errors": run.errors,
        }
        text = json.dumps(result, indent=2)
        print(text)  # noqa: T201 - a bench script reports on stdout
        if a.out:
            a.out.write_text(text + "\n")
    finally:
        for p in procs:
            p.kill()
            p.wait(5)


if __name__ == "__main__":
    main()
