"""Injected latency on agent->qdrant shows in the e2e series within one sample interval.

The real local stack, the real fault proxy on the edge, Locust load through the agent
runtime: nothing stands in for anything.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: qdrant-latency-visible}
spec:
  stack: stack/local.yaml
  duration: 12s
  warmup: 3s
  recovery: 2s
  # Short answers of a fixed length (see the profile below): the LLM's share of e2e is
  # small and steady, so the 200 ms on the retrieval edge stands out of the noise.
  load:
    workload: http
    target: agent
    method: POST
    path: /v1/chat
    body: {session_id: probe, message: "What is the refund policy for annual plans?", rag: true}
    users: 4
    spawn_rate: 50
    sample_interval: 500ms
  faults:
    - {name: slow-qdrant, inject: latency, target: agent->qdrant, at: 5s, duration: 4s,
       with: {latency: 200ms}}
"""


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_200ms_on_agent_to_qdrant_shows_within_one_sample_interval(tmp_path: Path) -> None:
    (tmp_path / "stack").mkdir()
    shutil.copy(ROOT / "stack" / "agent.yaml", tmp_path / "stack" / "agent.yaml")
    profile = (ROOT / "stack" / "local.yaml").read_text()
    fixed = '["--model", "sim-primary", "--output-len-dist", "fixed", "--output-len-mean", "8"]'
    assert '["--model", "sim-primary"]' in profile
    profile = profile.replace('["--model", "sim-primary"]', fixed)
    (tmp_path / "stack" / "local.yaml").write_text(profile)
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
    # One round trip to Qdrant per chat: about 200 ms more, already in the first interval
    # (0.15 s leaves room for the ±20 ms the short fixed answers still vary by).
    assert p50[first_after] >= base + 0.15, (base, first_after, p50)
    during = [v for t, v in p50.items() if injected <= t and t + interval <= injected + 4.0]
    assert statistics.median(during) >= base + 0.15
