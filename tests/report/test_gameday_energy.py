"""The scorecard carries each scenario's tokens per joule and its trend across game days."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.report.telemetry import phase, record_run

from faultday.core.journal import Journal
from faultday.report.gameday import (
    CHECK_WEIGHTS,
    DEFAULT_WEIGHT,
    GameDay,
    Trend,
    overall,
    read_gameday,
    summarize,
    trends,
)
from faultday.report.html import gameday_page


def _day(folder: Path, journal: Journal, *, started: float) -> GameDay:
    gd = GameDay(id=folder.name, started=started, scenarios=[summarize(journal, folder)])
    overall(gd)
    folder.mkdir(parents=True, exist_ok=True)
    gd.write(folder)
    return read_gameday(folder)  # what the next game day reads back


def test_tokens_per_joule_and_its_trend_on_the_scorecard(tmp_path: Path) -> None:
    # Day 1: the fault costs little (40 tokens/s at 400 W); day 2: the same fault at 250 W
    # for 10 tokens/s — less work per joule.
    day1 = record_run(tmp_path / "d1" / "run", fault=phase(gpu_tokens=40.0))
    day2 = record_run(tmp_path / "d2" / "run", fault=phase(gpu_tokens=10.0, gpu_power=250.0))
    now = time.time()
    gd1 = _day(tmp_path / "d1", day1, started=now - 3600)
    gd2 = _day(tmp_path / "d2", day2, started=now)
    e1, e2 = gd1.scenarios[0].energy, gd2.scenarios[0].energy
    assert e1.baseline == pytest.approx(50 / 400) and e1.faults == pytest.approx(40 / 400)
    assert e2.faults == pytest.approx(10 / 250)
    assert e2.goodput_faults == pytest.approx(e2.faults)
    (st,) = trends(gd1, gd2)[0]
    assert st.tpj_trend == Trend.WORSE
    assert (st.tpj_before, st.tpj_after) == (e1.faults, e2.faults)
    page = gameday_page(
        gd=gd2,
        previous=gd1,
        scenario_trends=[st],
        check_trends=[],
        weights=CHECK_WEIGHTS,
        default_weight=DEFAULT_WEIGHT,
        runbooks=False,
        runbook_note="",
    )
    assert "tokens/J baseline → faults (goodput)" in page
    assert "0.125 → 0.04 (0.04)" in page
    assert 'class="trend-worse tpj-trend">worse<' in page


def test_a_run_without_gpu_metrics_has_no_figure(tmp_path: Path) -> None:
    journal = record_run(tmp_path / "run")
    (tmp_path / "run" / "timeseries.csv").unlink()
    energy = summarize(journal, tmp_path).energy
    assert energy.baseline is None and energy.faults is None
