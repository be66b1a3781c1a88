"""The HTML report in a real browser (headless Chromium): no console errors, no script runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.report import traced
from tests.report.chromium import CHROMIUM, open_pages
from tests.report.journals import failed_journal, write_series

from faultday.core.journal import Journal
from faultday.report.render import render_all

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)
SCREENSHOT = ROOT / "docs" / "img" / "report.png"


def test_reports_load_cleanly_and_hostile_text_stays_text(
    failed_run: tuple[Journal, Path],
    aborted_run: tuple[Journal, Path],
    tmp_path: Path,
) -> None:
    probes = {
        "title": "document.title",
        "scripts": "document.scripts.length",
        "handlers": "document.querySelectorAll('[onerror],[onload],[onclick]').length",
        "xss_as_text": "document.body.innerText.includes(\"<script>document.title='pwned'\")",
        "charts": "document.querySelectorAll('.chart svg').length",
        "chart_width": "document.querySelector('.chart svg').getBoundingClientRect().width",
        "font": "getComputedStyle(document.body).fontFamily",
    }
    failed, aborted = open_pages(
        [failed_run[1] / "report.html", aborted_run[1] / "report.html"],
        expressions=probes,
        full_page=False,
    )
    for page in (failed, aborted):
        assert page.console_errors == [], page.console_errors
        assert page.values["scripts"] == 0 and page.values["handlers"] == 0
        assert page.values["xss_as_text"] is True
        assert "pwned" not in page.values["title"]
        assert page.screenshot.startswith(b"\x89PNG")
    assert failed.values["title"].startswith("FAILED")
    assert aborted.values["title"].startswith("ABORTED")
    assert failed.values["charts"] == 4 and aborted.values["charts"] == 1
    assert "Arial" in failed.values["font"]  # the stylesheet arrived intact (not HTML-escaped)
    assert failed.values["chart_width"] > 800  # charts scale to the page, not a thumbnail
    shot = tmp_path / "report.png"
    shot.write_bytes(failed.screenshot)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    if os.environ.get("FAULTDAY_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def test_game_day_index_loads_cleanly(
    failed_run: tuple[Journal, Path],
    aborted_run: tuple[Journal, Path],
    tmp_path: Path,
) -> None:
    from faultday.gameday import facts_from_profile
    from faultday.report import gameday as gdm

    folder = failed_run[1].parent
    journals = [failed_run[0], aborted_run[0]]
    before = gdm.GameDay(
        id="gameday-20251231T000000",
        started=1.0,
        ended=2.0,
        scenarios=[gdm.summarize(j, folder) for j in journals],
    )
    before.scenarios[0].checks[1].verdict = "passed"  # the fallback used to hold
    gdm.overall(before)
    now = gdm.GameDay(
        id="gameday-20260101T000000",
        started=3.0,
        ended=4.0,
        scenarios=[gdm.summarize(j, folder) for j in journals],
    )
    gdm.overall(now)
    gdm.render_gameday(
        now,
        folder,
        journals=journals,
        previous=before,
        base_dir=ROOT,
        runbook_facts=lambda: facts_from_profile("local", base_dir=ROOT),
    )
    (page,) = open_pages(
        [folder / "index.html"],
        expressions={
            "rows": "document.querySelectorAll('#trend-table tbody tr').length",
            "worse": "document.querySelectorAll('#trend-table td.trend-worse').length",
            "links": "[...document.querySelectorAll('a')].map(a => a.getAttribute('href'))",
        },
    )
    assert page.console_errors == [], page.console_errors
    assert page.values["worse"] == 1
    assert page.values["rows"] == len(now.scenarios[0].checks) + len(now.scenarios[1].checks)
    assert f"{failed_run[1].name}/report.html" in page.values["links"]
    assert "runbooks/index.html" in page.values["links"]
    assert now.score is not None and before.score is not None and now.score < before.score


def test_where_the_time_went_renders_its_svgs_cleanly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    journal = failed_journal(run_dir)
    write_series(run_dir)
    # A span name that would be live markup anywhere it were quoted unescaped.
    traced.write(run_dir, traced.Shape(name="<img src=x onerror=console.error(1)>search"))
    assert render_all(journal, run_dir) == []
    (page,) = open_pages(
        [run_dir / "report.html"],
        expressions={
            "waterfalls": "document.querySelectorAll('.waterfall svg').length",
            "width": "document.querySelector('.waterfall svg').getBoundingClientRect().width",
            "rows": "document.querySelectorAll('.waterfall svg g.span').length",
            "errors": "document.querySelectorAll('.waterfall svg g.span-error').length",
            "chart": "document.querySelectorAll('#chart-hops svg').length",
            "images": "document.images.length",
            "label": "document.querySelector('.waterfall svg g.span:nth-of-type(2) text')"
            ".textContent",
            "trace": "document.querySelector('.waterfall svg').getAttribute('aria-label')",
        },
        full_page=False,
    )
    assert page.console_errors == [], page.console_errors
    assert page.values["waterfalls"] == 2 and page.values["chart"] == 1
    assert page.values["width"] > 800
    assert page.values["rows"] == 9 and page.values["errors"] == 4
    assert page.values["images"] == 0  # the <img> in the span name stayed text
    assert page.values["label"].startswith("<img src=x onerror=console.error(1)>search")
    assert page.values["trace"] == f"waterfall of trace {traced.TRACE_SLOW}"
