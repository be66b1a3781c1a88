"""Kill trials: SIGKILL the harness in every phase of a five-fault run, then recover.

Each trial runs the real ``faultday run`` on the reference stack (simulated LLMs,
the real tritonserver in PyTriton, the fault proxy, Redis, Locust), kills it with
SIGKILL when the ledger shows the phase, runs ``faultday recover`` and asserts:
no process of the run alive (found by its marker, not by name), no /dev/shm
segment or temporary folder of the run left, every fault reverted, and a second
recover finds nothing. After the trials, the same scenario runs to the end and
passes on the same machine. (New Triton folders in /tmp are counted machine-wide:
no other Triton may start meanwhile, as in CI's serial runs.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.conftest import FAULTDAY, ROOT, faultday, wait_for

from faultday.core.ledger import LEDGER_NAME, Ledger
from faultday.core.marked import ledger_pids
from faultday.stack import shm

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).parent / "data" / "five-faults.scenario.yaml"
TIME_SCALE = "0.25"
TMP = Path("/tmp")  # where Triton leaves its folders whatever TMPDIR says
TRITON_TMP = ("folder", "python_env_")


@dataclass(frozen=True)
class Trial:
    phase: str
    ready: Callable[[Ledger], bool]  # kill once this holds
    delay: float = 0.0  # then wait this long first
    sigterm_first: bool = False  # mid-revert: stop the run, then kill it while it reverts

    def __str__(self) -> str:
        return f"{self.phase}+{self.delay:g}s"


def _recs(ledger: Ledger, op: str) -> list[dict[str, object]]:
    return [r for r in ledger.records() if r.get("op") == op]


def _spawns(n: int) -> Callable[[Ledger], bool]:
    return lambda led: led.last_phase() == "stack-up" and len(_recs(led, "spawn")) >= n


def _phase(name: str) -> Callable[[Ledger], bool]:
    return lambda led: led.last_phase() == name


def _reverts(n: int) -> Callable[[Ledger], bool]:
    return lambda led: len(_recs(led, "revert")) >= n


def _restarting(led: Ledger) -> bool:
    """The gpu_loss replica is being started again (a spawn of it after its fault)."""
    recs = led.records()
    first = next((i for i, r in enumerate(recs) if r.get("op") == "revert"), None)
    return first is not None and any(
        r.get("op") == "spawn" and r.get("component") == "llm-primary" for r in recs[first:]
    )


TRIALS = [
    Trial("stack-up", _spawns(1)),
    Trial("stack-up", _spawns(4)),
    Trial("stack-up", _spawns(8)),
    Trial("warm-up", _phase("warm-up")),
    Trial("warm-up", _phase("warm-up"), 0.5),
    Trial("warm-up", _phase("warm-up"), 0.9),
    Trial("first-fault", _reverts(1)),
    Trial("first-fault", _reverts(1), 0.1),
    Trial("first-fault", _reverts(1), 0.3),
    Trial("mid-fault", _reverts(3)),
    Trial("mid-fault", _reverts(5)),
    Trial("mid-fault", _reverts(5), 0.5),
    Trial("restart", _restarting),
    Trial("restart", _restarting, 0.1),
    Trial("restart", _restarting, 0.3),
    Trial("mid-revert", _phase("revert"), 0.0, sigterm_first=True),
    Trial("mid-revert", _phase("revert"), 0.2, sigterm_first=True),
    Trial("mid-revert", _phase("revert"), 0.5, sigterm_first=True),
    Trial("recovery", _phase("recovery")),
    Trial("recovery", _phase("recovery"), 1.0),
    Trial("stack-down", _phase("stack-down")),
    Trial("stack-down", _phase("stack-down"), 0.2),
]


def _tmp_entries() -> set[str]:
    return {p.name for p in TMP.iterdir()}


def _shm_entries() -> set[str]:
    return {p.name for p in shm.SHM_DIR.iterdir() if shm.is_python_shm(p.name)}


def _ledgers(report: Path) -> list[Ledger]:
    return [Ledger(p) for p in report.rglob(LEDGER_NAME)]


@pytest.mark.parametrize("trial", TRIALS, ids=str)
def test_sigkill_then_recover_leaves_nothing(tmp_path: Path, trial: Trial) -> None:
    report = tmp_path / "r"
    tmp_before, shm_before = _tmp_entries(), _shm_entries()
    out = tmp_path / "harness.log"
    argv = [*FAULTDAY, "run", str(SCENARIO), "--time-scale", TIME_SCALE, "--report-dir"]
    argv.append(str(report))
    with out.open("wb") as fh:
        harness = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        )

    def until(pred: Callable[[Ledger], bool], what: str) -> None:
        """Wait for ``pred``; a run that ended first fails the trial with its own words."""
        wait_for(lambda: pred(ledger) or harness.poll() is not None, 120, what)
        assert harness.poll() is None, f"the run ended before {what}:\n{out.read_text()[-3000:]}"

    try:
        path = wait_for(lambda: next(iter(report.glob(f"*/{LEDGER_NAME}")), None), 60, "a ledger")
        ledger = Ledger(path)
        if trial.sigterm_first:
            until(_reverts(5), "every fault")
            harness.send_signal(signal.SIGTERM)
        until(trial.ready, f"phase {trial.phase}")
        time.sleep(trial.delay)
        assert harness.poll() is None, f"the run ended before the kill:\n{out.read_text()[-3000:]}"
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        r = faultday("recover", "--report-dir", str(report))
        assert r.returncode == 0, r.stdout + r.stderr
        # No process of the run alive, found by marker: nothing escaped the ledger.
        assert [ledger_pids(led) for led in _ledgers(report)] == [[]] * len(_ledgers(report))
        for led in _ledgers(report):
            assert led.outstanding_reverts() == [], r.stdout  # every fault reverted
            assert led.outstanding_processes() == [], r.stdout
            assert led.outstanding_cleanups() == [], r.stdout
            assert not any(p.exists() for p in led.tmp_paths()), r.stdout
            assert not (led.path.parent / "tmp").exists(), r.stdout
        # No shared memory nor Triton folder of the run left (nothing new and unmapped).
        assert shm.orphaned(_shm_entries() - shm_before) == set(), r.stdout
        new_tmp = {n for n in _tmp_entries() - tmp_before if n.startswith(TRITON_TMP)}
        assert new_tmp == set(), r.stdout
        # A second recover finds nothing.
        again = faultday("recover", "--report-dir", str(report))
        assert (again.returncode, again.stdout.strip()) == (0, "nothing to recover"), again.stdout
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        faultday("recover", "--report-dir", str(report))


def test_after_the_trials_the_scenario_runs_to_the_end_and_passes(tmp_path: Path) -> None:
    report = tmp_path / "r"
    tmp_before = _tmp_entries()
    r = faultday(
        "run", str(SCENARIO), "--time-scale", TIME_SCALE, "--report-dir", str(report), timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next(report.glob("*/"))
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["verdict"] == "passed"
    assert all(f["revert_ok"] for f in journal["faults"])
    ledger = Ledger.in_dir(run_dir)
    assert ledger_pids(ledger) == []
    # A passing run leaves no temporary folder anywhere either.
    assert {n for n in _tmp_entries() - tmp_before if n.startswith(TRITON_TMP)} == set()
    assert not (run_dir / "tmp").exists()
    assert faultday("recover", "--report-dir", str(report)).stdout.strip() == "nothing to recover"
