"""`faultday preflight --profile local` with no stack running: it starts one, checks it and
stops it; SIGTERM midway stops it too (exit 3). Two full stack starts: slow."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import FAULTDAY, processes_mentioning, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leftovers")]


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    # Another folder than the checkout: the packaged local profile and agent.yaml are used,
    # and no `faultday stack up` state is found there.
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.Popen(
        [*FAULTDAY, "preflight", "--profile", "local", "--report-dir", str(tmp_path / "r")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_fresh_local_stack_passes_and_is_stopped_after(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = _start(tmp_path)
    _, err = proc.communicate(timeout=240)
    took = time.monotonic() - t0
    assert proc.returncode == 0, err
    assert "PREFLIGHT PASSED" in err
    (run,) = (tmp_path / "r").glob("preflight-*")
    assert (run / "stack" / "logs" / "agent.log").is_file()
    assert not processes_mentioning(str(tmp_path)), "the stack it started is down"
    print(f"fresh preflight of the local stack: {took:.1f}s")


def test_sigterm_midway_stops_the_stack_and_exits_3(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        wait_for(
            lambda: list((tmp_path / "r").glob("preflight-*/stack/logs/agent.log")),
            120,
            "the stack to start",
        )
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, err
    assert "PREFLIGHT ABORTED" in err
