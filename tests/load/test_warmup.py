"""Warm-up runs under load at any time scale: the engine waits for Locust's first request
before it starts warm-up, then tells the Locust children the t=0 that follows.

Real Locust children against the test server in ``data/okserver.py`` on 127.0.0.1; at a
warm-up of 1 s (a 10 s warm-up at time scale 0.1) Locust's own start (1-4 s) used to
eat the whole warm-up and the start of the baseline.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from tests.conftest import faultday, wait_for
from tests.load.test_load import scenario

from faultday.load.runner import LocustLoad
from faultday.load.standalone import StandaloneRun

DATA = Path(__file__).parent / "data"

PROFILE = """apiVersion: faultday/v1
kind: StackProfile
metadata: {{name: okstack}}
spec:
  proxy: null
  components:
    agent:
      type: command
      command: ["{{python}}", "{server}", "{{port}}", "{{run_dir}}"]
      ready: {{kind: http, path: /health}}
"""

SCENARIO = """apiVersion: faultday/v1
kind: Scenario
metadata: {name: warm-under-load}
spec:
  stack: ok.stack.yaml
  duration: 2s
  warmup: 1s
  recovery: 0s
  load: {workload: http, users: 2, spawn_rate: 100, sample_interval: 250ms}
  steady_state:
    - {check: error_rate, max: 0.0}
"""


@pytest.mark.usefixtures("no_leftovers")
def test_warm_up_starts_when_the_load_sends_its_first_request(tmp_path: Path) -> None:
    (tmp_path / "ok.stack.yaml").write_text(PROFILE.format(server=DATA / "okserver.py"))
    path = tmp_path / "warm.scenario.yaml"
    path.write_text(SCENARIO)
    r = faultday("run", str(path), "--report-dir", str(tmp_path / "r"), timeout=90)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    events = json.loads((run_dir / "journal.json").read_text())["events"]
    kinds = [e["kind"] if e["kind"] != "phase" else e["message"] for e in events]
    # The load starts, sends, and only then does warm-up begin.
    assert kinds.index("load.started") < kinds.index("load.sending") < kinds.index("warm-up")
    sending = next(e for e in events if e["kind"] == "load.sending")
    assert sending["data"]["after_s"] > 0 and sending["message"].startswith("first request")
    warmup = next(e for e in events if e["message"] == "warm-up")
    assert warmup["t"] == pytest.approx(-1.0, abs=0.02)
    assert warmup["wall"] >= sending["wall"]
    # Requests fill warm-up from its first sample interval to the run's end: the children
    # ran on the t=0 the engine fixed, not on the one they expected when spawned.
    with (run_dir / "timeseries.csv").open() as f:
        rps = {
            float(x["t"]): float(x["value"]) for x in csv.DictReader(f) if x["series"] == "load_rps"
        }
    busy = sorted(t for t, v in rps.items() if v > 0)
    assert busy[0] <= -0.75, rps  # [-1, -0.75) or the interval just before it
    assert busy[-1] >= 1.75, rps  # the last interval of the 2 s run
    assert all(rps[t] > 0 for t in rps if -0.75 <= t < 1.75), rps  # no gap under load


def test_the_children_run_on_the_t0_the_engine_fixes_not_the_one_they_expected(
    tmp_path: Path, ok_server: str
) -> None:
    # Spawned with warm-up 0 s and a 1 s run, a child expects to stop 2 s later (end + 1 s);
    # the engine fixes t=0 2.5 s after the first request: the child must run until then + 1 s.
    sc = scenario("1s", warmup="0s", workload="http", users=2, spawn_rate=100)
    run = StandaloneRun(sc, tmp_path, {"agent": ok_server})
    run.clock.t0_pending = True  # as the engine's clock is until warm-up starts
    load = LocustLoad(sc.spec.load)
    load.start(run)
    try:
        wait_for(load.sending, 30, "the load's first request")
        assert not run.observations.requests  # held until t=0 is known
        t0 = time.time() + 2.5
        run.clock.t0_mono, run.clock.t0_wall = time.monotonic() + 2.5, t0
        run.clock.t0_pending = False
        load.t0_fixed(t0)
        time.sleep(max(0.0, t0 + 2.5 - time.time()))  # past the run's end and its 1 s slack
    finally:
        load.stop()
    ts = [r.t for r in run.observations.requests]
    assert min(ts) < -2.0  # sent while t=0 was still to be fixed; timed from the real one
    assert max(ts) > 0.5  # still loading well after the end the child first expected
    assert max(ts) < 1.0 + 1.0 + 0.5  # and stopped at the real run's end (+1 s slack)
    assert load.stats.ready == 1 and load.stats.events == len(ts)
