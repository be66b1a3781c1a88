"""The run engine against real child processes on 127.0.0.1: phases, reverts, time scale."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest
from tests.conftest import faultday

DATA = Path(__file__).parent / "data"


def _journal(report_dir: Path) -> dict:
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    return json.loads((run_dir / "journal.json").read_text())


def _ledger(report_dir: Path) -> list[dict]:
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    return [json.loads(x) for x in (run_dir / "ledger.jsonl").read_text().splitlines()]


def _events(journal: dict, kind: str) -> list[dict]:
    return [e for e in journal["events"] if e["kind"] == kind]


def _write(tmp: Path, name: str, text: str) -> Path:
    (tmp / "procs.stack.yaml").write_text((DATA / "procs.stack.yaml").read_text())
    path = tmp / name
    path.write_text(text)
    return path


@pytest.mark.usefixtures("no_leftovers")
def test_run_injects_and_reverts_on_schedule(tmp_path: Path) -> None:
    r = faultday("run", str(DATA / "pause.scenario.yaml"), "--report-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    j = _journal(tmp_path)
    assert j["verdict"] == "passed"
    phases = [e["message"] for e in _events(j, "phase")]
    assert phases == [
        "stack-up",
        "warm-up",
        "baseline",
        "faults",
        "recovery",
        "steady-state",
        "revert",
        "checks",
        "stack-down",
        "done",
    ]
    # The timeline (sorted by scenario time) keeps that order: warm-up sits before t=0.
    by_time = sorted(_events(j, "phase"), key=lambda e: (e["t"], e["wall"]))
    assert [e["message"] for e in by_time] == phases
    assert by_time[1]["t"] <= 0 <= by_time[2]["t"]
    inj = {e["fault"]: e["t"] for e in _events(j, "fault.injected")}
    rev = {e["fault"]: e["t"] for e in _events(j, "fault.reverted")}
    assert inj["freeze"] == pytest.approx(1.0, abs=0.15)
    assert rev["freeze"] == pytest.approx(4.0, abs=0.15)
    assert rev["freeze-web"] == pytest.approx(3.0, abs=0.15)
    ledger = _ledger(tmp_path)
    reverts = {x["revert"]["id"] for x in ledger if x["op"] == "revert"}
    done = {x["id"] for x in ledger if x["op"] == "done" and x["ok"]}
    assert reverts == done and len(reverts) == 2
    # Every started process was stopped, by PID.
    started = [x["pid"] for x in ledger if x["op"] == "process"]
    stopped = [x["pid"] for x in ledger if x["op"] == "stopped"]
    assert sorted(started) == sorted(stopped)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in started)


@pytest.mark.usefixtures("no_leftovers")
def test_a_paused_component_fails_its_live_check_during_the_fault(tmp_path: Path) -> None:
    text = (DATA / "pause.scenario.yaml").read_text()
    # A two-second pause, so the mid-window probe has a second of margin on a busy machine.
    text = text.replace("at: 2s, duration: 1s}", "at: 1.5s, duration: 2s}")
    text += (
        "  expect:\n"
        "    - {during: freeze-web, check: health, target: web, path: /, timeout: 0.3}\n"
        "    - {after: freeze-web, check: health, target: web, path: /}\n"
    )
    scenario = _write(tmp_path, "x.scenario.yaml", text)
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == 1, r.stderr
    j = _journal(tmp_path / "r")
    verdicts = {(c["window"], c["check"]): c["verdict"] for c in j["checks"]}
    assert verdicts[("during freeze-web", "health")] == "failed"
    assert verdicts[("after freeze-web", "health")] == "passed"
    assert "during freeze-web: health web expected / → 200, observed no answer" in r.stderr


@pytest.mark.usefixtures("no_leftovers")
def test_time_scale_compresses_wall_time_not_windows(tmp_path: Path) -> None:
    # Timing only: no live probe, whose answer time depends on how busy the machine is.
    text = (
        (DATA / "pause.scenario.yaml")
        .read_text()
        .replace("  steady_state:\n    - {check: health, target: web, path: /, status: 200}\n", "")
    )
    scenario = _write(tmp_path, "t.scenario.yaml", text)
    t0 = time.monotonic()
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"), "--time-scale", "0.25")
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    j = _journal(tmp_path / "r")
    assert j["checks"] == []
    inj = {e["fault"]: e for e in _events(j, "fault.injected")}
    rev = {e["fault"]: e for e in _events(j, "fault.reverted")}
    # Scenario times keep their meaning …
    assert inj["freeze"]["t"] == pytest.approx(1.0, abs=0.3)
    assert rev["freeze"]["t"] == pytest.approx(4.0, abs=0.3)
    # … while the wall clock runs four times faster.
    assert rev["freeze"]["wall"] - inj["freeze"]["wall"] == pytest.approx(0.75, abs=0.1)
    phases = {e["message"]: e["wall"] for e in _events(j, "phase")}
    assert phases["revert"] - phases["baseline"] == pytest.approx(6.0 * 0.25, abs=0.3)
    assert wall < 6.0 + 10.0  # the unscaled timeline alone would take 6 s; start-up is extra
    assert [w["label"] for w in j["windows"]][:3] == ["whole run", "baseline", "after recovery"]


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    before = {p.pid for p in psutil.process_iter()}
    r = faultday(
        "run", str(DATA / "pause.scenario.yaml"), "--dry-run", "--report-dir", str(tmp_path / "r")
    )
    assert r.returncode == 0, r.stderr
    for text in (
        "freeze",
        "process_pause",
        "ticker",
        "1s",
        "4s",
        "health",
        "baseline",
        "after recovery",
    ):
        assert text in r.stdout
    assert "nothing was started or changed" in r.stdout
    assert not (tmp_path / "r").exists()
    new = {p.pid for p in psutil.process_iter()} - before
    assert not [
        p for p in new if psutil.pid_exists(p) and "ticker" in " ".join(psutil.Process(p).cmdline())
    ]


@pytest.mark.usefixtures("no_leftovers")
def test_a_stack_that_cannot_start_is_an_error_with_a_journal(tmp_path: Path) -> None:
    (tmp_path / "bad.stack.yaml").write_text(
        "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: bad}\nspec:\n"
        "  proxy: null\n  components:\n    dies:\n      type: command\n"
        "      command: ['{python}', '-c', 'import sys; print(\"boom: no config\"); sys.exit(3)']\n"
        "      ready: {kind: tcp, timeout: 5s}\n"
    )
    scenario = tmp_path / "s.scenario.yaml"
    scenario.write_text(
        "apiVersion: faultday/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n"
        "  stack: bad.stack.yaml\n  duration: 2s\n  load: {workload: none}\n"
    )
    r = faultday("run", str(scenario), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    j = _journal(tmp_path / "r")
    assert j["verdict"] == "error"
    assert "dies" in j["reason"]


def test_usage_mistakes_exit_2_with_a_message_not_a_traceback() -> None:
    scenario = str(DATA / "pause.scenario.yaml")
    for args, text in [
        (["run", scenario, "--drivr", "x"], "No such option: --drivr"),
        (["run", scenario, "--driver", "kubernets"], "did you mean 'kubernetes'?"),
        (["run", scenario, "--time-scale", "0"], "--time-scale"),
        (["recover", "/nonexistent/run"], "no ledger.jsonl here"),
        (["list", "plugins"], "No such command"),
    ]:
        r = faultday(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert text in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
