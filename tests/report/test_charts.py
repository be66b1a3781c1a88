"""Charts: which windows are shaded, and fault names that stay readable when faults overlap."""

from __future__ import annotations

import re
from pathlib import Path

from tests.report.journals import failed_journal, write_series

from faultday.core.journal import JournalFault, JournalWindow
from faultday.core.vocab import WindowKind
from faultday.engine.plan import make_plan
from faultday.report.charts import make_charts, rest_spans
from faultday.report.series import read_series
from faultday.scenario.loader import load_scenario

# The fixture journal's scenario, as a user would write it.
SCENARIO = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: failed}
spec:
  stack: local
  duration: 60s
  warmup: 2s
  recovery: 10s
  load: {workload: chat, users: 8}
  steady_state:
    - {check: error_rate, max: 0.01}
  faults:
    - {name: xid79, inject: gpu_loss, target: llm-primary, at: 20s, duration: 20s}
"""


def test_the_fixture_windows_are_the_ones_the_engine_plans(tmp_path: Path) -> None:
    path = tmp_path / "failed.scenario.yaml"
    path.write_text(SCENARIO)
    plan = make_plan(load_scenario(path).scenario, time_scale=1.0)
    planned = [
        JournalWindow(kind=w.kind, label=w.label, start=w.start, end=w.end, fault=w.fault)
        for w in plan.windows
    ]
    assert failed_journal(tmp_path / "run").windows == planned


def test_baseline_and_after_recovery_are_shaded_as_rest(tmp_path: Path) -> None:
    journal = failed_journal(tmp_path / "run")
    rest = {
        (w.start, w.end)
        for w in journal.windows
        if w.kind in (WindowKind.BASELINE, WindowKind.RECOVERED)
    }
    assert set(rest_spans(journal)) == rest == {(0, 20), (50, 60)}


def _texts(svg: str) -> list[tuple[float, float, str]]:
    """(x, y, text) of each <text> element: matplotlib writes text as text (svg.fonttype none)."""
    out = []
    for m in re.finditer(r'<text[^>]*\bx="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*)</text>', svg):
        out.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    return out


def test_six_faults_starting_together_keep_their_names_apart(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    journal = failed_journal(run_dir)
    names = [f"fault-{i}" for i in range(6)]
    journal.faults = [
        JournalFault(
            name=n,
            inject="gpu_loss",
            target="llm-primary",
            at=20,
            duration=20,
            injected_at=20.0,
            reverted_at=40.0,
        )
        for n in names
    ]
    write_series(run_dir)
    charts = {c.name: c.svg for c in make_charts(journal, read_series(run_dir))}
    assert "latency" in charts
    labels = [t for t in _texts(charts["latency"]) if any(n in t[2] for n in names)]
    assert sorted(n for n in names if any(n in t[2] for t in labels)) == names
    # No two names share a spot: on one row they are at least a name's width apart.
    for i, (x1, y1, s1) in enumerate(labels):
        for x2, y2, s2 in labels[i + 1 :]:
            if abs(y1 - y2) < 6:
                assert abs(x1 - x2) > 4 * min(len(s1), len(s2)), (s1, s2, x1, x2)
