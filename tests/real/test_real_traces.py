"""Real vLLM's own spans in a run: `llm_request` under the agent's call, split by phase.

A short `faultday run` on `local-real` (no faults): the launcher gives vLLM
`--otlp-traces-endpoint` and OTLP/HTTP, vLLM exports one `llm_request` span a
request with its `gen_ai.latency.*` figures, parented by the traceparent the agent
sent; the run copies it into traces.db, splits it into queue/prefill/decode
pseudo-hops in traces.json, and the report names them. docs/real-vllm.md, "Traces".
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import faultday

from faultday.observe.trace_analysis import LLM_PHASES, LLM_SPAN

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

LLM = "llm-primary"
# Stack up (vLLM on 2 busy cores, the tiny model built first) plus ~30 s of load.
RUN_TIMEOUT_S = 600.0
SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: real-traces, title: real vLLM's spans reach the run's traces}
spec:
  stack: local-real
  duration: 20s
  warmup: 0s
  load: {workload: chat, users: 3, spawn_rate: 3}
"""
Row = tuple[str, str, str, str, str, str]  # trace, span, parent, service, name, attributes


def _ancestors(span: Row, by_id: dict[str, Row]) -> list[Row]:
    """The span's parents, nearest first, as far as the run kept them."""
    chain: list[Row] = []
    parent = by_id.get(span[2])
    while parent is not None and len(chain) < len(by_id):
        chain.append(parent)
        parent = by_id.get(parent[2])
    return chain


@pytest.mark.usefixtures("real_python", "no_leftovers")
def test_real_vllm_spans_reach_the_run_and_its_report(
    tmp_path: Path, observe: Callable[[str, object], None]
) -> None:
    scenario = tmp_path / "real-traces.scenario.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"), timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    (run_dir,) = (tmp_path / "r").iterdir()

    with sqlite3.connect(run_dir / "traces.db") as db:
        rows: list[Row] = db.execute(
            "SELECT trace_id, span_id, parent_id, service, name, attributes FROM spans"
        ).fetchall()
    by_id = {row[1]: row for row in rows}
    llm = [row for row in rows if row[3] == LLM and row[4] == LLM_SPAN]
    assert llm, sorted({(row[3], row[4]) for row in rows})
    # vLLM's span continues the request's trace: its parents lead to the agent's spans.
    under_agent = [s for s in llm if any(p[3] == "agent" for p in _ancestors(s, by_id))]
    assert under_agent, [(s[0], s[2]) for s in llm[:5]]
    chains = [_ancestors(s, by_id) for s in under_agent]
    assert all(p[0] == s[0] for s, chain in zip(under_agent, chains, strict=True) for p in chain)
    # ... up to the agent's handling of a client's request: its root in the stack.
    assert all(chain[-1][3:5] == ("agent", "POST /v1/chat") for chain in chains)
    attrs = json.loads(under_agent[0][5])
    assert {attr for _, attr in LLM_PHASES} <= attrs.keys(), attrs

    traces = json.loads((run_dir / "traces.json").read_text())
    hops = {h["hop"]: h for w in traces["windows"] for h in w["hops"]}
    phases = {phase: hops.get(f"{LLM}/{LLM_SPAN} {phase}") for phase, _ in LLM_PHASES}
    assert all(phases.values()), sorted(hops)
    whole = max(traces["windows"], key=lambda w: w["traced"])
    share = {h["hop"]: h["share"] for h in whole["hops"]}
    observe("spans kept", len(rows))
    observe("llm_request spans (under the agent)", f"{len(llm)} ({len(under_agent)})")
    observe("llm-primary decode share of request time", share.get(f"{LLM}/{LLM_SPAN} decode"))
    top = whole["top"]
    # A session's history that outgrows vLLM's --max-model-len is a 400 (the agent then
    # falls back to the simulator): local-real's former 512 after a few turns; 2048 holds.
    attempts = [json.loads(r[5]) for r in rows if r[3:5] == ("agent", f"{LLM} chat attempt")]
    too_long = sum(a.get("http.response.status_code") == 400 for a in attempts)
    observe("llm-primary attempts answered 400", f"{too_long} of {len(attempts)}")
    assert too_long == 0, "a session outgrew local-real's --max-model-len"
    observe("top hop", f"{top['service']}/{top['span']} {top['share']}" if top else None)

    # The report names vLLM's phases where it says where the time went.
    named = [f"{LLM}/{LLM_SPAN} {phase}" for phase in ("decode", "prefill")]
    for report in ("report.md", "report.html"):
        text = (run_dir / report).read_text()
        section = text[text.find("Where the time went") :]
        assert any(hop in section for hop in named), section[:3000]
