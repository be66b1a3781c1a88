"""The ``faultday.reporters`` plugins: ``(journal, run_dir) -> {artifact name: file name}``."""

from __future__ import annotations

import logging
from pathlib import Path

from faultday.core.journal import Journal
from faultday.report.html import report_html, report_markdown
from faultday.report.junit import JUNIT_NAME, write_junit
from faultday.report.view import Chart, build_view

log = logging.getLogger(__name__)

CHART_DIR = "charts"


def markdown(journal: Journal, run_dir: Path) -> dict[str, str]:
    """``report.md``, with its charts as SVG files under ``charts/``."""
    view = build_view(journal, run_dir)
    (run_dir / CHART_DIR).mkdir(exist_ok=True)
    files = [(c.title, _write_chart(run_dir, c)) for c in view.charts]
    time_chart = _write_chart(run_dir, view.time_chart) if view.time_chart else ""
    (run_dir / "report.md").write_text(
        report_markdown(view, files, time_chart=time_chart), encoding="utf-8"
    )
    return {"report.md": "report.md"}


def _write_chart(run_dir: Path, chart: Chart) -> str:
    rel = f"{CHART_DIR}/{chart.name}.svg"
    (run_dir / rel).write_text(chart.svg, encoding="utf-8")
    return rel


def html(journal: Journal, run_dir: Path) -> dict[str, str]:
    """``report.html``: one self-contained file, charts inline as SVG."""
    view = build_view(journal, run_dir)
    (run_dir / "report.html").write_text(report_html(view), encoding="utf-8")
    return {"report.html": "report.html"}


def junit(journal: Journal, run_dir: Path) -> dict[str, str]:
    """``junit.xml``: one testcase per check."""
    write_junit([journal], run_dir / JUNIT_NAME, name=f"faultday {journal.run_id}")
    return {"junit.xml": JUNIT_NAME}
