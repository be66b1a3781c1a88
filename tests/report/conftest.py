"""Fixtures for report tests: journals of a failed and of an aborted run, rendered."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.report.journals import aborted_journal, failed_journal, write_series

from faultday.core.journal import Journal
from faultday.report.render import render_all


@pytest.fixture
def failed_run(tmp_path: Path) -> tuple[Journal, Path]:
    run_dir = tmp_path / "20260101T000000-gpu-loss-primary"
    journal = failed_journal(run_dir)
    write_series(run_dir)
    assert render_all(journal, run_dir) == []
    return journal, run_dir


@pytest.fixture
def aborted_run(tmp_path: Path) -> tuple[Journal, Path]:
    run_dir = tmp_path / "20260101T000100-gpu-loss-naive"
    journal = aborted_journal(run_dir)
    assert render_all(journal, run_dir) == []
    return journal, run_dir
