"""Signals to a real ``faultday run``: a second or third one never abandons a revert.

The scenario pauses a ticker, then kills a server whose restart takes 30 s; the
reverts run last in first out, so the slow restart holds the SIGCONT back while
signals arrive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import FAULTDAY, ROOT, wait_for

from faultday.core.ledger import Ledger
from faultday.core.marked import marked_pids

DATA = Path(__file__).parent / "data"
SLOW_RESTART_S = 30.0


def _launch(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A real ``faultday run`` of the slow-revert scenario; its run folder once it exists."""
    report = tmp_path / "r"
    proc = subprocess.Popen(
        [*FAULTDAY, "run", str(DATA / "slow-revert.scenario.yaml"), "--report-dir", str(report)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    ledger = wait_for(lambda: next(iter(report.glob("*/ledger.jsonl")), None), 30, "a ledger")
    return proc, ledger.parent


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    proc, run_dir = _launch(tmp_path)
    # Both faults injected: two reverts on disk, the killed server not yet restarted.
    wait_for(lambda: len(Ledger.in_dir(run_dir).outstanding_reverts()) == 2, 60, "two faults")
    return proc, run_dir


def _reverting(run_dir: Path) -> bool:
    return Ledger.in_dir(run_dir).last_phase() == "revert"


def _assert_clean_end(run_dir: Path, output: str) -> None:
    ledger = Ledger.in_dir(run_dir)
    assert ledger.outstanding_reverts() == [], output
    assert ledger.outstanding_processes() == [], output
    assert marked_pids(ledger.markers()) == {}, output
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["verdict"] == "aborted", output
    assert (run_dir / "report.html").is_file(), output
    assert {f["name"]: f["revert_ok"] for f in journal["faults"]}["freeze"] is True


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out


@pytest.mark.slow  # 30-35 s: make test-slow (CI runs it)
def test_a_second_signal_during_the_reverts_does_not_interrupt_them(tmp_path: Path) -> None:
    proc, run_dir = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: _reverting(run_dir), 30, "the revert phase")
    time.sleep(0.5)  # inside the slow restart now
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None, "a second signal ended the run during its reverts"
    started = time.monotonic()
    rc, out = _finish(proc, SLOW_RESTART_S + 60)
    assert rc == 3, out
    assert "reverts in progress and not interruptible" in out
    # It waited for the restart it was doing: the killed server came back before the end.
    assert time.monotonic() - started > SLOW_RESTART_S - 10, out
    journal = json.loads((run_dir / "journal.json").read_text())
    assert {f["name"]: f["revert_ok"] for f in journal["faults"]}["kill"] is True
    _assert_clean_end(run_dir, out)


def test_a_third_signal_skips_the_restart_wait_but_still_reverts_everything(
    tmp_path: Path,
) -> None:
    proc, run_dir = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: _reverting(run_dir), 30, "the revert phase")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc, out = _finish(proc, 30)
    assert rc == 3, out
    assert time.monotonic() - sent < SLOW_RESTART_S / 2, "the third signal did not hurry it"
    assert "skipping the waits for restarts" in out
    _assert_clean_end(run_dir, out)


@pytest.mark.parametrize("signals", [1, 2])
def test_signals_while_the_stack_starts_end_the_start_up_and_exit_3(
    tmp_path: Path, signals: int
) -> None:
    proc, run_dir = _launch(tmp_path)
    wait_for(lambda: Ledger.in_dir(run_dir).last_phase() == "stack-up", 30, "stack-up")
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    rc, out = _finish(proc, 30)
    assert rc == 3, out
    ledger = Ledger.in_dir(run_dir)
    assert ledger.outstanding_processes() == [], out
    assert marked_pids(ledger.markers()) == {}, out
    assert json.loads((run_dir / "journal.json").read_text())["verdict"] == "aborted"
