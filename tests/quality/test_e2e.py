"""vector-store-outage on the real local stack: canned/off-topic answers during the outage, ok
after it, in the checks, in answers.jsonl and in the report (about 40 s at --time-scale 0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

from faultday.core.journal import read_journal
from faultday.core.records import ANSWERS_NAME

SCENARIO = ROOT / "scenarios" / "vector-store-outage.scenario.yaml"


@pytest.mark.slow
def test_vector_store_outage_reports_answer_quality(tmp_path: Path) -> None:
    done = faultday(
        "run", str(SCENARIO), "--time-scale", "0.1", "--report-dir", str(tmp_path), timeout=240
    )
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "journal.json").exists()]
    journal = read_journal(run_dir)
    quality = {(c.window, c.label): c for c in journal.checks if c.check == "quality"}
    during = quality["during qdrant-down", "quality canned/off_topic"]
    after = quality["after recovery", "quality ok"]
    assert during.verdict == "passed" and after.verdict == "passed", (during, after, done.stdout)
    assert float(during.observed.rstrip("%")) >= 70 and float(after.observed.rstrip("%")) >= 90
    assert "off_topic" in during.message

    fault = next(w for w in journal.windows if w.kind == "fault")
    recovered = next(w for w in journal.windows if w.kind == "recovered")
    samples = [json.loads(x) for x in (run_dir / ANSWERS_NAME).read_text().splitlines()]
    inside = [s for s in samples if fault.start + 5 <= s["t"] < fault.end]
    late = [s for s in samples if recovered.start <= s["t"] < recovered.end]
    assert inside and all(s["label"] in ("off_topic", "canned") for s in inside), inside[:3]
    assert all(s["sources"] == [] and s["cited"] == [] for s in inside)
    assert late and all(s["label"] == "ok" for s in late), late[:3]
    # An ok RAG answer cites some of the documents it was given.
    assert all(set(s["cited"]) and set(s["cited"]) <= set(s["sources"]) for s in late)

    md = (run_dir / "report.md").read_text()
    section = md[md.index("## Sampled answers") : md.index("## Runbook")]
    assert "### during qdrant-down" in section and "| off_topic |" in section
    assert "### after recovery" in section
