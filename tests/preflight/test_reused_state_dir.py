"""A stack started again in the folder of an earlier one is judged on its own logs.

The earlier stack's GPU component logged an Xid 79 (as real vLLM's host log does
after a gpu-loss game day); after `stack down` and `stack up` in the same
`--state-dir`, preflight's log check passes the new, healthy stack, and the old
log is kept aside under logs/previous/<UTC time>/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import faultday
from tests.stack.conftest import marked_processes

from faultday.core.exits import ExitCode
from faultday.core.vocab import Verdict

XID = "ERROR 12-04 23:40:00 [engine.py:12] Xid 79: GPU has fallen off the bus"
# The component logs the Xid when the run folder holds a file named `xid` (its cwd).
GPU = f"import os, time; print({XID!r} if os.path.exists('xid') else 'INFO ok', flush=True); "
GPU += "time.sleep(600)"


def _stack(*args: str, profile: Path, state: Path) -> None:
    r = faultday("stack", *args, "--profile", str(profile), "--state-dir", str(state))
    assert r.returncode == 0, r.stdout + r.stderr


def _preflight(profile: Path, state: Path, reports: Path) -> tuple[int, str, Path]:
    r = faultday(
        "preflight",
        "--profile",
        str(profile),
        "--state-dir",
        str(state),
        "--report-dir",
        str(reports),
    )
    (run,) = sorted(reports.glob("preflight-*"))[-1:]
    return r.returncode, r.stderr, run


def _log_check(run: Path) -> dict[str, object]:
    journal = json.loads((run / "journal.json").read_text())
    (c,) = [c for c in journal["checks"] if c["label"] == "gpu-box: error-level lines"]
    return dict(c)


def test_stack_up_in_a_used_state_dir_logs_afresh_and_preflight_passes(tmp_path: Path) -> None:
    profile = tmp_path / "gpu.yaml"
    profile.write_text(
        "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: gpu}\n"
        "spec:\n  proxy: null\n  components:\n"
        f"    gpu-box: {{command: ['{{python}}', '-c', {json.dumps(GPU)}],\n"
        "              ready: {kind: none}}\n"
    )
    state = tmp_path / "state"
    state.mkdir()
    (state / "xid").touch()
    try:
        _stack("up", profile=profile, state=state)
        log = state / "logs" / "gpu-box.log"
        code, err, run = _preflight(profile, state, tmp_path / "r1")
        assert code == ExitCode.FAILED, err
        assert _log_check(run)["verdict"] == Verdict.FAILED
        assert f"{log}:2: {XID}" in " ".join(err.split())
        _stack("down", profile=profile, state=state)

        (state / "xid").unlink()  # the GPU is healthy again
        _stack("up", profile=profile, state=state)
        code, err, run = _preflight(profile, state, tmp_path / "r2")
        assert code == ExitCode.PASSED, err
        assert _log_check(run)["verdict"] == Verdict.PASSED
        assert XID not in log.read_text().splitlines()

        (kept,) = (state / "logs" / "previous").iterdir()
        assert re.fullmatch(r"\d{8}T\d{6}Z", kept.name), kept.name
        assert XID in (kept / "gpu-box.log").read_text().splitlines()
    finally:
        faultday("stack", "down", "--profile", str(profile), "--state-dir", str(state))
        assert marked_processes(state.resolve()) == []
