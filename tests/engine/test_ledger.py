"""The ledger's cleanup records: what a participant or driver created, replayed only by recover."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from pydantic import JsonValue

from faultday.core.ledger import Ledger, cleanup_registry
from faultday.core.targets import Revert
from faultday.engine.recover import find_ledgers, recover_run
from faultday.engine.runner import Run, RunOptions
from faultday.scenario.loader import load_scenario

DATA = Path(__file__).parent / "data"


def _cleanup(name: str = "objects-1", injector: str = "k8s_load") -> Revert:
    return Revert(
        injector=injector, fault="load", target=name, action="delete", data={"names": [name]}
    )


def _ops(ledger: Ledger) -> list[str]:
    return [str(r["op"]) for r in ledger.records()]


def test_cleanups_are_outstanding_until_done_ok_newest_first(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    a, b, c = _cleanup("a"), _cleanup("b"), _cleanup("c")
    for rec in (a, b, c):
        ledger.add_cleanup(rec)
    assert [r.target for r in ledger.outstanding_cleanups()] == ["c", "b", "a"]
    ledger.cleanup_done(b, ok=True)
    ledger.cleanup_done(c, ok=False, error="API server unreachable")
    # A failed cleanup stays outstanding, for a later recover to retry; the data round-trips.
    assert ledger.outstanding_cleanups() == [c, a]
    assert _ops(ledger) == ["cleanup"] * 3 + ["cleanup_done"] * 2
    assert ledger.records()[-1]["error"] == "API server unreachable"
    # A fresh Ledger on the same file (another process: recover) reads the same.
    assert Ledger(ledger.path).outstanding_cleanups() == [c, a]


def test_cleanups_and_reverts_are_separate_kinds(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    rev = Revert(injector="process_pause", fault="f", target="t", action="sigcont", data={})
    cln = _cleanup()
    ledger.add_revert(rev)
    ledger.add_cleanup(cln)
    assert ledger.outstanding_reverts() == [rev]
    assert ledger.outstanding_cleanups() == [cln]
    # A "done" of a revert never closes a cleanup, nor the other way round (same id here).
    twin = Revert(injector="k8s_load", fault="load", target="x", action="delete", id=rev.id)
    ledger.add_cleanup(twin)
    ledger.revert_done(twin, ok=True)
    assert ledger.outstanding_cleanups() == [twin, cln]
    assert ledger.outstanding_reverts() == []
    ledger.cleanup_done(cln, ok=True)
    ledger.cleanup_done(twin, ok=True)
    assert ledger.outstanding_cleanups() == []


def test_a_torn_record_is_skipped_with_a_warning_and_the_next_one_starts_its_own_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger.in_dir(tmp_path)
    rec, other = _cleanup(), _cleanup()
    ledger.add_cleanup(rec)
    with ledger.path.open("a") as fh:
        fh.write('{"op":"cleanup_done","id":')  # the harness died mid-write (or the disk filled)
    assert ledger.outstanding_cleanups() == [rec]
    # Records appended after the torn one (recover's own) are not glued onto it.
    ledger.add_cleanup(other)
    ledger.cleanup_done(rec, ok=True)
    lines = ledger.path.read_text().splitlines()
    assert lines[1] == '{"op":"cleanup_done","id":'
    with caplog.at_level("WARNING"):
        assert ledger.outstanding_cleanups() == [other]
    assert "ledger.jsonl:2: torn ledger record skipped" in caplog.text


def test_find_ledgers_counts_an_outstanding_cleanup(tmp_path: Path) -> None:
    run = tmp_path / "20260101T000000-x"
    ledger = Ledger.in_dir(run)
    rec = _cleanup()
    ledger.add_cleanup(rec)
    assert find_ledgers(tmp_path) == [run]
    ledger.cleanup_done(rec, ok=True)
    assert find_ledgers(tmp_path) == []


def test_the_registry_is_its_own_group_not_the_injectors() -> None:
    from faultday.injectors.base import injector_registry

    assert "k8s_load" in cleanup_registry()
    assert "k8s_load" not in injector_registry()  # never offered to scenarios as a fault


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[psutil.Process]:
    """A SIGSTOPped child: the fault a revert must undo."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(60)  # {tmp_path}"], start_new_session=True
    )
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        yield psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def _pause_revert(p: psutil.Process, fault: str) -> Revert:
    data: dict[str, JsonValue] = {"pid": p.pid, "create_time": p.create_time()}
    return Revert(
        injector="process_pause", fault=fault, target="ticker", action="sigcont", data=data
    )


@pytest.mark.usefixtures("no_leftovers")
def test_recover_runs_reverts_then_cleanups_and_an_unknown_cleanup_fails_loudly(
    tmp_path: Path, paused: psutil.Process
) -> None:
    ledger = Ledger.in_dir(tmp_path)
    cln = _cleanup(injector="no_such_cleanup")
    ledger.add_cleanup(cln)  # recorded first, replayed after the fault's revert
    rev = _pause_revert(paused, "freeze")
    ledger.add_revert(rev)
    result = recover_run(tmp_path, stop_processes=False)
    assert (result.reverted, result.cleaned, result.failed) == (1, 0, 1)
    assert result.messages[0].startswith("reverted process_pause on ticker")
    assert result.messages[1].startswith("FAILED to clean up no_such_cleanup objects-1 (delete)")
    assert "unknown cleanup 'no_such_cleanup'" in result.messages[1]
    assert _ops(ledger)[-2:] == ["done", "cleanup_done"]
    assert paused.status() != psutil.STATUS_STOPPED
    assert ledger.outstanding_cleanups() == [cln]  # a later recover retries it


@pytest.mark.usefixtures("no_leftovers")
def test_run_revert_all_replays_faults_never_cleanups(
    tmp_path: Path, paused: psutil.Process
) -> None:
    """The participant deletes its own objects at stop (after reading their status): a run's
    revert_all must leave cleanup records alone, even one no injector could handle."""
    run = Run(load_scenario(DATA / "pause.scenario.yaml"), RunOptions(run_dir=tmp_path / "run"))
    cln = _cleanup(injector="k8s_load")
    run.ledger.add_cleanup(cln)
    rev = _pause_revert(paused, "freeze")  # a fault whose inject raised halfway
    run.ledger.add_revert(rev)
    run.revert_all()
    assert paused.status() != psutil.STATUS_STOPPED
    assert run.ledger.outstanding_reverts() == []
    assert run.ledger.outstanding_cleanups() == [cln]
    assert _ops(run.ledger) == ["cleanup", "revert", "done"]
    assert run.journal.errors == []
