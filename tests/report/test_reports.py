"""Incident reports from journals: a failed run, an aborted run, hostile text, JUnit, CLI."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import faultday

from faultday.core.journal import Journal, read_journal

SECTIONS = [
    "Verdict",
    "Diagnosis",
    "Impact",
    "Tokens per joule",
    "Charts",
    "Where the time went",
    "Timeline",
    "Checks",
    "Faults",
    "Degradation paths taken",
    "Runbook steps that apply",
    "Action items",
    "Appendix",
]


def _h2(text: str, *, html: bool) -> list[str]:
    pattern = r"<h2[^>]*>(.*?)</h2>" if html else r"(?m)^## (.+)$"
    return re.findall(pattern, text)


def test_failed_run_report_has_every_section_and_says_what_failed(
    failed_run: tuple[Journal, Path],
) -> None:
    _, run_dir = failed_run
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    for text, is_html in ((md, False), (html, True)):
        heads = _h2(text, html=is_html)
        assert [h for h in heads if h in SECTIONS] == SECTIONS, heads
    assert "FAILED" in md and "2/4 checks passed" in md
    # Impact from timeseries.csv: 600 requests, every error inside the fault window.
    assert "| 600 |" in md
    # Action items derived from the failed checks, with the observed numbers.
    assert "7.3× downstream amplification on agent->tools" in md
    assert "backoff" in md and "breaker" in md
    assert "only 80.2% of requests fell back" in md
    # The runbook steps for the run's stack (local driver).
    assert "faultday stack logs llm-primary --profile local" in md
    # The degradation paths taken: breaker transitions and the fallback reason.
    assert "breaker.open llm-primary" in md and "degraded: fallback:llm-backup" in md


def test_charts_are_inline_svg_with_the_fault_window_labelled(
    failed_run: tuple[Journal, Path],
) -> None:
    _, run_dir = failed_run
    html = (run_dir / "report.html").read_text()
    charts = re.findall(r'<div class="chart" id="chart-(\w+)">\s*<svg', html)
    assert charts == ["timeline", "latency", "throughput", "degraded"]
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html  # inline, not documents
    latency = html[html.index('id="chart-latency"') : html.index('id="chart-throughput"')]
    assert "xid79" in latency  # the shaded window carries the fault's name
    # Element ids stay unique across the inline charts (one page, several SVGs).
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    # The Markdown report links the same charts as files.
    md = (run_dir / "report.md").read_text()
    for name in charts:
        assert f"(charts/{name}.svg)" in md
        assert (run_dir / "charts" / f"{name}.svg").read_text().startswith("<svg")


def test_aborted_run_report_is_complete_and_lists_what_was_not_judged(
    aborted_run: tuple[Journal, Path],
) -> None:
    _, run_dir = aborted_run
    md = (run_dir / "report.md").read_text()
    assert [h for h in _h2(md, html=False) if h in SECTIONS] == SECTIONS
    assert "ABORTED" in md and "abort condition tripped: error_rate 62.0% > 50.0%" in md
    not_judged = md[md.index("Not evaluated") : md.index("## Faults")]
    for label in (
        "during xid79: fallback_rate",
        "after xid79: recovery_time",
        "steady_state: error_rate",
    ):
        assert label in not_judged
    assert "no timeseries.csv" in md  # charts degrade to the fault timeline, and say so
    assert "| 27.00 | `abort` |" in md
    assert "the run was aborted" in md  # an action item
    html = (run_dir / "report.html").read_text()
    assert re.findall(r'id="chart-(\w+)"', html) == ["timeline"]


def test_model_output_is_text_never_markup(failed_run: tuple[Journal, Path]) -> None:
    _, run_dir = failed_run
    html = (run_dir / "report.html").read_text()
    assert "<script" not in html.lower()
    assert "onerror=alert" not in html.replace("&#34;", "").split("&lt;img")[0]
    assert "&lt;script&gt;document.title=&#39;pwned&#39;" in html
    md = (run_dir / "report.md").read_text()
    assert "<script>" in md  # inside a fenced code block, which no renderer executes
    block = md[md.index("## Quoted responses") :]
    assert re.search(r"```+\n<script>document\.title", block)


def test_junit_has_a_testcase_per_check_with_expected_and_observed(
    failed_run: tuple[Journal, Path],
    aborted_run: tuple[Journal, Path],
) -> None:
    suite = ET.parse(failed_run[1] / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "0")
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    amp = failures["[expect] during xid79: during xid79: retry_amplification"]
    assert amp is not None and amp.get("message") == "expected ≤ 1.5×, observed 7.3× (n=180)"
    aborted = ET.parse(aborted_run[1] / "junit.xml").getroot().find("testsuite")
    assert aborted is not None
    assert (
        aborted.get("tests"),
        aborted.get("failures"),
        aborted.get("errors"),
        aborted.get("skipped"),
    ) == ("6", "1", "1", "4")


def test_faultday_report_renders_again_from_the_journal(failed_run: tuple[Journal, Path]) -> None:
    _, run_dir = failed_run
    for name in ("report.html", "report.md", "junit.xml"):
        (run_dir / name).unlink()
    r = faultday("report", str(run_dir))
    assert r.returncode == 0, r.stderr
    for name in ("report.html", "report.md", "junit.xml"):
        assert (run_dir / name).is_file()
        assert str(run_dir / name) in r.stdout
    assert read_journal(run_dir).artifacts["report.html"] == "report.html"
    bad = faultday("report", str(run_dir / "charts"))
    assert bad.returncode == 2 and "no journal.json" in bad.stderr
