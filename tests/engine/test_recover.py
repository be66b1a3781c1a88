"""Crash safety: a harness killed with SIGKILL leaves a ledger that `faultday recover` replays."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.conftest import FAULTDAY, ROOT, faultday, processes_mentioning, wait_for

from faultday.core.ledger import Ledger
from faultday.core.marked import marked_pids
from faultday.core.targets import Revert
from faultday.engine.recover import find_ledgers, recover_run

DATA = Path(__file__).parent / "data"


def _start_run(tmp_path: Path, scenario: str) -> tuple[subprocess.Popen[bytes], Path]:
    report = tmp_path / "r"
    proc = subprocess.Popen(
        [*FAULTDAY, "run", str(DATA / scenario), "--report-dir", str(report), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dir = wait_for(
        lambda: next(iter(report.glob("*/ledger.jsonl")), None), 30, "a ledger"
    ).parent
    return proc, run_dir


def _paused_ticker(run_dir: Path) -> psutil.Process:
    def find() -> psutil.Process | None:
        if not Ledger.in_dir(run_dir).outstanding_reverts():
            return None
        for p in processes_mentioning(str(run_dir)):
            if "ticker.beat" in " ".join(p.cmdline()) and p.status() == psutil.STATUS_STOPPED:
                return p
        return None

    return wait_for(find, 30, "the ticker to be paused")


def _beats(run_dir: Path) -> bool:
    beat = run_dir / "ticker.beat"
    first = beat.read_text()
    time.sleep(0.3)
    return beat.read_text() != first


@pytest.mark.usefixtures("no_leftovers")
def test_recover_after_sigkill_resumes_the_paused_child(tmp_path: Path) -> None:
    harness, run_dir = _start_run(tmp_path, "long-pause.scenario.yaml")
    try:
        ticker = _paused_ticker(run_dir)
        assert not _beats(run_dir)
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        time.sleep(0.2)
        assert ticker.status() == psutil.STATUS_STOPPED  # nobody reverted it
        # Replay the reverts but keep the processes, to see the child run again.
        r = faultday("recover", str(run_dir), "--keep-processes")
        assert r.returncode == 0, r.stderr
        assert "reverted process_pause on ticker (fault freeze)" in r.stdout
        assert ticker.status() != psutil.STATUS_STOPPED
        assert _beats(run_dir)
        assert not Ledger.in_dir(run_dir).outstanding_reverts()
        # A second recover stops what the crashed run left running.
        r = faultday("recover", "--report-dir", str(tmp_path / "r"))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: not processes_mentioning(str(run_dir)), 10, "processes to stop")
        assert faultday("recover", str(run_dir)).stdout.strip().endswith("nothing outstanding")
    finally:
        if harness.poll() is None:
            harness.kill()


@pytest.mark.usefixtures("no_leftovers")
def test_sigint_aborts_reverts_and_exits_3(tmp_path: Path) -> None:
    harness, run_dir = _start_run(tmp_path, "long-pause.scenario.yaml")
    try:
        _paused_ticker(run_dir)
        harness.send_signal(signal.SIGINT)
        assert harness.wait(30) == 3
    finally:
        if harness.poll() is None:
            harness.kill()
    j = json.loads((run_dir / "journal.json").read_text())
    assert j["verdict"] == "aborted"
    assert "SIGINT" in j["reason"]
    assert not Ledger.in_dir(run_dir).outstanding_reverts()
    assert not Ledger.in_dir(run_dir).outstanding_processes()


def _sleeper(tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(60)  # {tmp_path}"], start_new_session=True
    )


@pytest.mark.usefixtures("no_leftovers")
def test_reverts_run_lifo_and_a_failing_one_does_not_stop_the_others(tmp_path: Path) -> None:
    procs = [_sleeper(tmp_path) for _ in range(3)]
    try:
        ledger = Ledger.in_dir(tmp_path)
        reverts = []
        for i, p in enumerate(procs):
            os.kill(p.pid, signal.SIGSTOP)
            data = {"pid": p.pid, "create_time": psutil.Process(p.pid).create_time()}
            if i == 1:
                data["create_time"] = "not a number"  # this revert will fail
            rev = Revert(
                injector="process_pause", fault=f"f{i}", target=f"p{i}", action="sigcont", data=data
            )
            ledger.add_revert(rev)
            reverts.append(rev)
        result = recover_run(tmp_path, stop_processes=False)
        assert result.reverted == 2 and result.failed == 1
        done = [r for r in ledger.records() if r["op"] == "done"]
        assert [d["id"] for d in done] == [reverts[2].id, reverts[1].id, reverts[0].id]
        assert [d["ok"] for d in done] == [True, False, True]
        assert any("FAILED to revert process_pause on p1" in m for m in result.messages)
        assert psutil.Process(procs[0].pid).status() != psutil.STATUS_STOPPED
        assert psutil.Process(procs[2].pid).status() != psutil.STATUS_STOPPED
        assert psutil.Process(procs[1].pid).status() == psutil.STATUS_STOPPED
        # The failed one stays outstanding, for a later recover to retry.
        assert [r.id for r in ledger.outstanding_reverts()] == [reverts[1].id]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_torn_last_ledger_line_is_tolerated(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    rev = Revert(injector="process_pause", fault="f", target="t", action="sigcont", data={})
    ledger.add_revert(rev)
    with ledger.path.open("a") as fh:
        fh.write('{"op": "done", "id": ')  # the harness died mid-write
    assert [r.id for r in ledger.outstanding_reverts()] == [rev.id]


@pytest.mark.usefixtures("no_leftovers")
def test_recover_keep_processes_fails_a_restart_it_cannot_do_and_keeps_it_outstanding(
    tmp_path: Path,
) -> None:
    harness, run_dir = _start_run(tmp_path, "long-kill.scenario.yaml")
    try:
        wait_for(lambda: Ledger.in_dir(run_dir).outstanding_reverts(), 30, "the kill")
        time.sleep(0.3)
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        # The killed server cannot come back while its stack is kept: a failure, exit 4.
        r = faultday("recover", str(run_dir), "--keep-processes")
        assert r.returncode == 4, r.stdout + r.stderr
        assert "FAILED to revert process_kill on web (fault down)" in r.stdout
        assert "web cannot be restarted" in r.stdout
        assert "reverted process_kill" not in r.stdout
        assert [x.fault for x in Ledger.in_dir(run_dir).outstanding_reverts()] == ["down"]
        # Without --keep-processes the restart is moot: the stack is stopped.
        r = faultday("recover", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "reverted process_kill on web (fault down)" in r.stdout
        ledger = Ledger.in_dir(run_dir)
        assert ledger.outstanding_reverts() == [] and ledger.outstanding_processes() == []
        assert marked_pids(ledger.markers()) == {}
    finally:
        if harness.poll() is None:
            harness.kill()


def _spawn_marked(ledger: Ledger, tmp_path: Path) -> subprocess.Popen[bytes]:
    """As the supervisor does, minus the PID record: a harness killed right after Popen."""
    env = {**os.environ, **ledger.add_spawn("stray")}
    # A leader in its own session whose child leaves that session too: only the marker
    # ties the child to the run.
    code = (
        "import os,subprocess,sys,time\n"
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "time.sleep(60)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], env=env, start_new_session=True
    )


def test_recover_finds_processes_by_marker_when_their_pid_never_reached_the_ledger(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "r" / "20260101T000000-x"
    ledger = Ledger.in_dir(run_dir)
    outside = tmp_path / "outside-tmp"
    ledger.add_tmp(outside)
    outside.mkdir()
    (run_dir / "tmp").mkdir()
    leader = _spawn_marked(ledger, tmp_path)
    try:
        found = wait_for(lambda: marked_pids(ledger.markers()).get(ledger.marker(), []), 10, "pids")
        wait_for(lambda: len(marked_pids(ledger.markers())[ledger.marker()]) == 2, 10, "the child")
        assert ledger.outstanding_processes() == []  # nothing recorded by PID
        assert find_ledgers(tmp_path / "r") == [run_dir]
        r = faultday("recover", "--report-dir", str(tmp_path / "r"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count("found by the run's marker") == 2, r.stdout
        assert marked_pids(ledger.markers()) == {}
        assert not outside.exists() and not (run_dir / "tmp").exists()
        assert all(not psutil.pid_exists(p) or _zombie(p) for p in found)
        # A second recover finds nothing.
        assert find_ledgers(tmp_path / "r") == []
        assert faultday("recover", "--report-dir", str(tmp_path / "r")).stdout.strip() == (
            "nothing to recover"
        )
    finally:
        for pids in marked_pids(ledger.markers()).values():
            for p in pids:
                os.kill(p, signal.SIGKILL)
        leader.kill()
        leader.wait()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_recover_finds_a_process_that_overwrote_its_environment_by_folder_and_spawn_time(
    tmp_path: Path,
) -> None:
    """redis-server writes its process title over its environment: the marker is gone."""
    run_dir = tmp_path / "r" / "20260101T000000-x"
    ledger = Ledger.in_dir(run_dir)
    env = {**os.environ, **ledger.add_spawn("redis")}
    port = _free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        cwd=run_dir,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _answers(port), 10, "redis")
        assert marked_pids(ledger.markers()) == {}  # the marker cannot be read any more
        assert find_ledgers(tmp_path / "r") == [run_dir]
        r = faultday("recover", "--report-dir", str(tmp_path / "r"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"pid={redis.pid}: stopped (SIGTERM) (found by the run's marker)" in r.stdout
        assert redis.wait(5) is not None
        assert find_ledgers(tmp_path / "r") == []
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
