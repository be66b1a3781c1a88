"""Injected latency on agent->qdrant shows in the e2e series within one sample interval.

The real local stack, the real fault proxy on the edge, Locust load through the agent
runtime: nothing stands in for anything.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from tests.conftest import faultday

SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: qdrant-latency-visible}
spec:
  stack: local
  duration: 12s
  warmup: 3s
  recovery: 2s
  load: {workload: rag, users: 4, spawn_rate: 50, sample_interval: 500ms}
  faults:
    - {name: slow-qdrant, inject: latency, target: agent->qdrant, at: 5s, duration: 4s,
       with: {latency: 200ms}}
"""


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_200ms_on_agent_to_qdrant_shows_within_one_sample_interval(tmp_path: Path) -> None:
    scenario = tmp_path / "lat.scenario.yaml"
    scenario.write_text(SCENARIO)
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"), timeout=300)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())
    (fault,) = journal["faults"]
    injected = fault["injected_at"]
    interval = 0.5
    p50: dict[float, float] = {}
    with (run_dir / "timeseries.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["series"] == "load_e2e_p50" and not row["labels"]:
                p50[float(row["t"])] = float(row["value"])
    before = [v for t, v in p50.items() if t >= 0 and t + interval <= injected]
    assert len(before) >= 4, p50
    base = statistics.median(before)
    first_after = min(t for t in p50 if t >= injected)
    assert first_after - injected <= interval
    # At least one round trip to Qdrant per chat: the full 200 ms, in the first interval.
    assert p50[first_after] >= base + 0.18, (base, first_after, p50)
