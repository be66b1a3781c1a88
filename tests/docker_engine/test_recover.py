"""Crash safety on the real engine: the harness is SIGKILLed mid-fault, then `faultday recover`.

The run pauses one container and disconnects another; after the kill, recover
must unpause and reconnect (the faults' reverts, from the ledger) and then
remove the run's containers and network (the driver's cleanup record); a second
recover finds nothing outstanding; a container that took one of the names but
does not carry the run's labels is refused (reported, exit 4) and left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultday.cluster.config import PART_OF_LABEL
from faultday.cluster.docker_render import faultday_image
from faultday.core.ledger import Ledger

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
PART_OF = "faultday-local"
ENV = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "crash.scenario.yaml"
    path.write_text(
        "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: docker-crash}\n"
        "spec:\n  stack: local\n  duration: 600s\n  warmup: 0s\n"
        "  load: {workload: none}\n  faults:\n"
        "    - {name: freeze, inject: container_pause, target: tools, at: 1s, duration: 500s}\n"
        "    - {name: cut, inject: network_disconnect, target: qdrant, at: 1s, duration: 500s}\n"
    )
    return path


def _recover(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultday.cli", "recover", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )


def _wait(what: str, ready: Callable[[], bool], harness: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 300
    while not ready():
        assert harness.poll() is None, f"the harness exited early ({harness.returncode})"
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sigkill_mid_fault_then_recover_leaves_nothing(
    engine: Any, nothing_left: Callable[[str], list[str]], tmp_path: Path
) -> None:
    report = tmp_path / "r"
    argv = [sys.executable, "-m", "faultday.cli", "run", str(_scenario(tmp_path))]
    argv += ["--driver", "docker", "--report-dir", str(report), "--no-progress"]
    harness = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    foreign = None
    try:

        def both_faults_in() -> bool:
            tools = engine.containers.list(filters={"name": "faultday-local-tools"})
            if not tools or not tools[0].attrs["State"]["Paused"]:
                return False
            qdrant = engine.containers.get("faultday-local-qdrant")
            return "faultday-local" not in qdrant.attrs["NetworkSettings"]["Networks"]

        _wait("both faults", both_faults_in, harness)
        harness.send_signal(signal.SIGKILL)
        assert harness.wait(10) == -signal.SIGKILL
        (run_dir,) = [d for d in report.iterdir() if d.is_dir()]
        assert len(Ledger.in_dir(run_dir).outstanding_reverts()) == 2
        assert nothing_left(f"{PART_OF_LABEL}={PART_OF}")  # nobody cleaned up

        # Someone removes one container and starts their own under its name, unlabelled.
        engine.containers.get("faultday-local-redis").remove(force=True)
        foreign = engine.containers.run(
            faultday_image(), ["sleep", "600"], name="faultday-local-redis", detach=True
        )

        r = _recover(run_dir)
        out = r.stdout + r.stderr
        # The faults are undone; every object of the run is removed but the impostor, which
        # recover refuses by name and reports (exit 4): the record stays outstanding.
        assert "reverted container_pause on tools" in out, out
        assert "reverted network_disconnect on qdrant" in out, out
        assert r.returncode == 4 and "refusing to remove it" in out, out
        foreign.reload()
        assert foreign.attrs["State"]["Running"], "recover touched a container not of the run"
        assert nothing_left(f"{PART_OF_LABEL}={PART_OF}") == [], out
        assert Ledger.in_dir(run_dir).outstanding_reverts() == []
        assert len(Ledger.in_dir(run_dir).outstanding_cleanups()) == 1

        # Its owner removes it; recover completes, and then has nothing left to do.
        foreign.remove(force=True)
        foreign = None
        r = _recover(run_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        assert Ledger.in_dir(run_dir).outstanding_cleanups() == []
        again = _recover(run_dir)
        assert again.returncode == 0 and "nothing" in again.stdout.lower(), again.stdout
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
        if foreign is not None:
            foreign.remove(force=True)
        if nothing_left(f"{PART_OF_LABEL}={PART_OF}"):  # a failed assertion: leave nothing
            _recover_all(engine)


def _recover_all(engine: Any) -> None:
    flt = {"label": f"{PART_OF_LABEL}={PART_OF}"}
    for c in engine.containers.list(all=True, filters=flt):
        c.remove(force=True)
    for n in engine.networks.list(filters=flt):
        n.remove()
