"""Tokens per joule per replica and window, from recorded dcgm-exporter and vLLM series."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.report.telemetry import phase, record_run

from faultday.core.journal import Journal
from faultday.core.vocab import WindowKind
from faultday.report.charts import gpu_charts
from faultday.report.energy import energy_rows, overall
from faultday.report.render import render_all
from faultday.report.series import read_series


def test_tokens_per_joule_per_window(tmp_path: Path) -> None:
    # Baseline: 50 tokens/s at 400 W; the fault: 20 tokens/s at 250 W, 30% errors.
    journal = record_run(
        tmp_path,
        fault=phase(gpu_tokens=20.0, gpu_power=250.0, load_error=0.3, gpu_prefix_hits=10.0),
    )
    rows = energy_rows(journal, read_series(tmp_path))
    base, fault = overall(rows, WindowKind.BASELINE), overall(rows, WindowKind.FAULT)
    assert base is not None and fault is not None
    assert base.component == fault.component == "llm-primary"
    # One scrape a second; a counter's growth from the last scrape before the window (none
    # before the baseline, so 19 steps there; 20 in the fault window) to the last inside.
    assert base.joules == pytest.approx(19 * 400.0)
    assert base.tokens == pytest.approx(19 * 50.0)
    assert fault.joules == pytest.approx(20 * 250.0)
    assert base.tokens_per_joule == pytest.approx(50 / 400)
    assert fault.tokens_per_joule == pytest.approx(20 / 250)
    assert base.goodput_per_joule == pytest.approx(base.tokens_per_joule)
    # Failed requests carry no tokens; degraded ones none here: goodput = tokens of ok ones.
    assert fault.goodput_per_joule == pytest.approx(fault.tokens_per_joule)
    assert base.prefix_hit_rate == pytest.approx(0.4)
    assert fault.prefix_hit_rate == pytest.approx(0.1)
    assert fault.prefill_saved == pytest.approx(20 * 10.0)
    assert base.sm_clock_mhz == 1980.0 and base.power_w == 400.0
    assert [r.window for r in rows] == ["baseline", "during xid79", "after recovery"]


def test_fallback_answers_are_not_goodput(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=phase(load_fallback=0.5))
    fault = overall(energy_rows(journal, read_series(tmp_path)), WindowKind.FAULT)
    assert fault is not None and fault.tokens_per_joule and fault.goodput_per_joule
    assert 0.3 < fault.goodput_per_joule / fault.tokens_per_joule < 0.7


def test_a_run_without_gpu_metrics_has_no_energy_table(failed_run: tuple[Journal, Path]) -> None:
    _, run_dir = failed_run
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "No GPU energy in this run's time series" in md


def test_reports_show_the_figures(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=phase(gpu_tokens=20.0, gpu_power=250.0))
    assert render_all(journal, tmp_path) == []
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Tokens per joule" in md
    assert (
        "| baseline | llm-primary | 7,600 | 400 | 1,980 | 950 | 0.125 | 0.125 | 40.0% | 760 |"
    ) in md
    assert "| during xid79 | llm-primary | 5,000 | 250 |" in md
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="energy-table"' in html and "0.08" in html


def test_charts_show_sm_clock_and_power_per_replica(tmp_path: Path) -> None:
    journal = record_run(tmp_path, fault=phase(gpu_sm_clock=660.0, gpu_power=250.0))
    charts = {c.name: c for c in gpu_charts(journal, read_series(tmp_path))}
    assert set(charts) == {"sm-clock", "power"}
    assert "llm-primary" in charts["sm-clock"].svg and "<svg" in charts["power"].svg
    assert render_all(journal, tmp_path) == []
    assert (tmp_path / "charts" / "sm-clock.svg").is_file()
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="chart-sm-clock"' in html and 'id="chart-power"' in html


def test_no_gpu_charts_without_dcgm_metrics(failed_run: tuple[Journal, Path]) -> None:
    journal, run_dir = failed_run
    assert gpu_charts(journal, read_series(run_dir)) == []
