"""The HTML report in a real browser (Debian's headless Chromium): no console errors, no script runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from faultday.report.journal import Journal
from tests.conftest import ROOT
from tests.report.chromium import CHROMIUM, open_pages

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)
SCREENSHOT = ROOT / "docs" / "img" / "report.png"


def test_reports_load_cleanly_and_hostile_text_stays_text(
    failed_run: tuple[Journal, Path], aborted_run: tuple[Journal, Path], tmp_path: Path,
) -> None:
    probes = {
        "title": "document.title",
        "scripts": "document.scripts.length",
        "handlers": "document.querySelectorAll('[onerror],[onload],[onclick]').length",
        "xss_as_text": "document.body.innerText.includes(\"<script>document.title='pwned'\")",
        "charts": "document.querySelectorAll('.chart svg').length",
        "chart_width": "document.querySelector('.chart svg').getBoundingClientRect().width",
    }
    failed, aborted = open_pages(
        [failed_run[1] / "report.html", aborted_run[1] / "report.html"], expressions=probes,
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
    assert failed.values["chart_width"] > 800  # charts scale to the page, not a thumbnail
    shot = tmp_path / "report.png"
    shot.write_bytes(failed.screenshot)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    if os.environ.get("FAULTDAY_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
