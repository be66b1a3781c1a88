"""Traces in a real run: 800 ms on agent->qdrant moves the request time to the vector hop.

The library scenario `slow-vectors` on the real local stack: Locust's traceparent, the
agent's, the proxy's, Qdrant's and the simulator's spans through the stack's collector,
copied into the run folder, analysed into traces.json and drawn in the report. Nothing
stands in for anything.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_slow_vectors_puts_the_time_in_the_vector_hop(tmp_path: Path) -> None:
    scenario = ROOT / "scenarios" / "slow-vectors.scenario.yaml"
    r = faultday("run", str(scenario), "--time-scale", "0.25", "--report-dir",
                 str(tmp_path / "r"), timeout=400)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["artifacts"]["traces"] == "traces.json"
    (collected,) = [e for e in journal["events"] if e["kind"] == "traces.collected"]
    with sqlite3.connect(run_dir / "traces.db") as db:
        kept = db.execute("SELECT count(*) FROM spans").fetchone()[0]
        services = {s for (s,) in db.execute("SELECT DISTINCT service FROM spans")}
    assert collected["data"]["spans"] == kept > 0
    # Every hop of the reference stack exported, each under its component's name.
    assert {"agent", "proxy", "qdrant", "llm-primary", "triton"} <= services

    traces = json.loads((run_dir / "traces.json").read_text())
    assert traces["requests"] > 0 and traces["requests_traced"] == traces["requests"]
    windows = {w["label"]: w for w in traces["windows"]}
    fault = next(w for w in traces["windows"] if w["kind"] == "fault")
    baseline = next(w for w in traces["windows"] if w["kind"] == "baseline")
    assert fault["label"] in windows and fault["fault"] == "slow-vectors"
    # The baseline's time is the model's; the fault window's, the vector store's.
    assert baseline["top"]["service"] == "llm-primary", baseline["top"]
    assert fault["top"]["service"] == "agent" and "vector" in fault["top"]["span"], fault["top"]
    assert fault["mover"]["span"] == fault["top"]["span"]
    assert fault["mover"]["baseline_share"] < 0.1
    assert fault["mover"]["share"] > 0.3
    vector = next(h for h in fault["hops"] if h["span"] == fault["top"]["span"])
    assert any(f.startswith("latency(latency=800") for f in vector["faults"]), vector
    assert vector["p99_s"] >= 0.8

    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    sentence = re.search(r"During slow-vectors, (\d+) % of request time was in ([^,]+),", md)
    assert sentence, md[md.find("## Where the time went") :][:2000]
    assert int(sentence.group(1)) >= 30 and "vector" in sentence.group(2)
    assert "the top hop was llm-primary/" in md
    # Exemplar waterfalls, each with its trace id: a text tree in Markdown, SVG in HTML.
    (slowest,) = [e for e in traces["exemplars"] if e["kind"] == "slowest_ok"]
    assert slowest["trace_id"] in md and slowest["trace_id"] in html
    assert "```text\nPOST /v1/chat  agent" in md
    assert "<svg" in html[html.find("Where the time went") :]
    assert (run_dir / "charts" / "hops.svg").is_file()
