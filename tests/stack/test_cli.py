"""`faultday stack up|status|logs|down` as separate shell invocations, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
from tests.stack.conftest import REPO, marked_processes

from faultday.core.ledger import Ledger

FAULTDAY = str(Path(sys.executable).parent / "faultday")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FAULTDAY, "stack", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_up_status_logs_down_across_invocations(tmp_path: Path) -> None:
    state = tmp_path / "state"
    opts = ["--profile", str(REPO / "stack" / "local.yaml"), "--state-dir", str(state)]
    try:
        up = _run("up", *opts, "--only", "qdrant,redis,triton", cwd=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "qdrant" in up.stdout
        assert "up in" in up.stdout
        info = json.loads((state / "state.json").read_text())["info"]
        pids = [c["pid"] for c in info["components"]]
        assert all(psutil.pid_exists(p) for p in pids)

        again = _run("up", *opts, "--only", "qdrant,redis", cwd=tmp_path)
        assert again.returncode == 4
        assert "already up" in again.stderr

        st = _run("status", *opts, cwd=tmp_path)
        assert st.returncode == 0, st.stdout + st.stderr
        assert st.stdout.count("ready") >= 2

        logs = _run("logs", "qdrant", *opts, cwd=tmp_path)
        assert "seeded docs__live with 40 documents" in logs.stdout

        ledger = Ledger.in_dir(state)
        assert any(p.is_dir() for p in ledger.tmp_paths())  # PyTriton's workspace
        down = _run("down", *opts, cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped" in down.stdout
        # The temporary folders of a stack another invocation started go with it.
        assert not any(p.exists() for p in ledger.tmp_paths())
        assert not (state / "tmp").exists()
        assert not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
            for p in pids
        )
        assert _run("status", *opts, cwd=tmp_path).returncode == 1
    finally:
        _run("down", *opts, cwd=tmp_path)
        assert marked_processes(state.resolve()) == []


def test_profile_errors_exit_2_with_positions(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: x}\nspec: {}\n")
    r = _run("up", "--profile", str(bad), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert r.returncode == 2
    assert f"{bad}:4:7: spec: missing required key 'components'" in r.stderr


def test_failing_start_reports_and_leaves_nothing(tmp_path: Path) -> None:
    prof = tmp_path / "p.yaml"
    prof.write_text(
        "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: x}\n"
        "spec:\n  proxy: null\n  components:\n    redis: {type: redis}\n"
        '    broken: {command: ["{python}", "-c", "print(\'cannot bind\'); import time; '
        'time.sleep(30)"], ready: {kind: tcp, timeout: 1s}}\n'
    )
    state = tmp_path / "s"
    r = _run("up", "--profile", str(prof), "--state-dir", str(state), cwd=tmp_path)
    assert r.returncode == 4
    assert "component 'broken' not ready after 1s" in r.stderr
    assert "cannot bind" in r.stderr
    assert "broken.log" in r.stderr
    assert marked_processes(state.resolve()) == []
