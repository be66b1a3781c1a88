"""An abort condition tripping mid-fault, end to end through `faultday run` with real processes.

The stack is two plain processes (no reference stack needed): the load's
target answers 200 until the fault kills it; the error rate crosses the abort
threshold; the engine reverts (restarts it), stops the load and exits 3.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.conftest import faultday

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
metadata: {name: abort-midfault}
spec:
  stack: ok.stack.yaml
  duration: 30s
  warmup: 2s
  load: {workload: http, users: 4, spawn_rate: 50, sample_interval: 250ms}
  faults:
    - {name: down, inject: process_kill, target: agent, at: 3s, duration: 20s}
  abort:
    - {check: error_rate, max: 0.5, for: 1s}
"""


@pytest.mark.usefixtures("no_leftovers")
def test_abort_trips_mid_fault_reverts_within_2s_and_exits_3(tmp_path: Path) -> None:
    (tmp_path / "ok.stack.yaml").write_text(PROFILE.format(server=DATA / "okserver.py"))
    scenario = tmp_path / "abort.scenario.yaml"
    scenario.write_text(SCENARIO)
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"), timeout=90)
    assert r.returncode == 3, r.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    j = json.loads((run_dir / "journal.json").read_text())
    assert j["verdict"] == "aborted"
    assert "abort condition tripped" in j["reason"] and "error_rate" in j["reason"]
    events = j["events"]
    tripped = next(e for e in events if e["kind"] == "abort")
    injected = next(e for e in events if e["kind"] == "fault.injected")
    reverted = next(e for e in events if e["kind"] == "fault.reverted")
    # Mid-fault: after the kill, long before the fault's window would have ended (t=23s).
    assert injected["t"] < tripped["t"] < 10.0
    # Every fault reverted within 2 s of the abort, measured on the journal's wall clock.
    assert reverted["wall"] - tripped["wall"] <= 2.0
    # The load stopped: no request recorded after the stop, and the load said so.
    stopped = next(e for e in events if e["kind"] == "load.stopped")
    assert stopped["data"]["requests"] > 20
    abort_check = next(c for c in j["checks"] if c["section"] == "abort")
    assert abort_check["verdict"] == "failed" and abort_check["check"] == "error_rate"
    assert (run_dir / "timeseries.csv").exists()
    assert sys.executable  # the run used this interpreter's faultday
