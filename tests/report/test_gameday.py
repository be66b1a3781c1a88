"""Game days against real processes: scorecard, exit status, runbooks, and the trend across two."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.conftest import ROOT, faultday

STACK = ROOT / "tests" / "engine" / "data" / "procs.stack.yaml"
STEADY = """\
apiVersion: faultday/v1
kind: Scenario
metadata: {name: ticker-freeze, title: The ticker freezes, tags: [quarterly]}
spec:
  stack: procs.stack.yaml
  duration: 8s
  warmup: 0s
  recovery: 1s
  load: {workload: none}
  steady_state:
    - {check: health, target: web, path: /, status: 200}
  faults:
    - {name: freeze, inject: process_pause, target: ticker, at: 2s, duration: 1.5s}
"""
# A live probe runs mid-window and must end inside it, or it says nothing (insufficient):
# at --time-scale 0.5 the 2 s baseline leaves the probe 0.5 s, not the 0.25 s a 1 s one did.
# Day 1 pauses the web server the check probes (fails); day 2 pauses the ticker instead (passes).
WEB = """\
apiVersion: faultday/v1
kind: Scenario
metadata:
  {{name: web-freeze, title: The web server freezes, tags: [quarterly], runbook: agent-crash,
    severity: SEV2}}
spec:
  stack: procs.stack.yaml
  duration: 6s
  warmup: 0s
  recovery: 1s
  load: {{workload: none}}
  faults:
    - {{name: freeze-web, inject: process_pause, target: {target}, at: 1s, duration: 3s}}
  expect:
    - {{during: freeze-web, check: health, target: web, path: /, timeout: 0.3}}
    - {{after: freeze-web, check: health, target: web, path: /}}
"""
UNTAGGED = STEADY.replace("ticker-freeze", "not-in-suite").replace("[quarterly]", "[other]")


def _suite(folder: Path, target: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "procs.stack.yaml").write_text(STACK.read_text())
    (folder / "a.scenario.yaml").write_text(STEADY)
    (folder / "b.scenario.yaml").write_text(WEB.format(target=target))
    (folder / "c.scenario.yaml").write_text(UNTAGGED)
    return folder


def _gameday(suite: Path, reports: Path) -> tuple[int, Path, str]:
    r = faultday(
        "gameday",
        str(suite),
        "--tag",
        "quarterly",
        "--time-scale",
        "0.5",
        "--report-dir",
        str(reports),
        "--no-progress",
        "--runbook-stack",
        "local",
        timeout=240,
    )
    m = re.search(r"index: (\S+)", r.stdout)
    assert m, r.stdout + r.stderr
    day = Path(m.group(1)).parent
    return r.returncode, day, r.stderr + _checks_not_passed(day)


def _checks_not_passed(day: Path) -> str:
    """What an unexpected verdict came from: each check that did not pass, and the logs."""
    try:
        gd = json.loads((day / "gameday.json").read_text())
    except (OSError, ValueError) as exc:
        return f"\n(no gameday.json: {exc})"
    lines = [
        f"{s['name']}: {c['label']} ({c['window']}) {c['verdict']}: "
        f"expected {c['expected']}, observed {c['observed']}"
        for s in gd["scenarios"]
        for c in s["checks"]
        if c["verdict"] != "passed"
    ]
    for log in sorted(day.glob("stack-*/logs/*.log")):
        lines += [f"--- {log.relative_to(day)}", *log.read_text().splitlines()[-15:]]
    return "\n" + "\n".join(lines)


@pytest.mark.slow  # ~20 s, two game days: make test-slow (CI runs it)
@pytest.mark.usefixtures("no_leftovers")
def test_two_game_days_the_second_shows_the_trend(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    rc, day1, err = _gameday(_suite(tmp_path / "s1", target="web"), reports)
    assert rc == 1, err  # the worst verdict: a failed check
    gd1 = json.loads((day1 / "gameday.json").read_text())
    assert [s["name"] for s in gd1["scenarios"]] == ["ticker-freeze", "web-freeze"]  # tag filter
    assert [s["verdict"] for s in gd1["scenarios"]] == ["passed", "failed"]
    # health weighs 1; ticker-freeze judges its steady state twice (baseline, after recovery).
    assert gd1["score"] == 75.0
    # One stack served both: a passed or failed run whose reverts all ran leaves it reusable.
    assert len([n for n in gd1["stack_notes"] if " up for " in n]) == 1, gd1["stack_notes"]
    index1 = (day1 / "index.html").read_text()
    assert "first game day in this report folder" in index1
    for s in gd1["scenarios"]:
        assert f'href="{s["run_dir"]}/report.html"' in index1
        assert (day1 / s["run_dir"] / "report.html").is_file()
    suites = ET.parse(day1 / "junit.xml").getroot()
    assert [s.get("name") for s in suites] == ["ticker-freeze", "web-freeze"]
    assert suites.get("failures") == "1"
    crash = (day1 / "runbooks" / "agent-crash.md").read_text()
    assert "`web-freeze` — health web (during freeze-web): observed no answer" in crash
    assert "(**failed**)" in crash

    rc, day2, err = _gameday(_suite(tmp_path / "s2", target="ticker"), reports)
    assert rc == 0, err
    gd2 = json.loads((day2 / "gameday.json").read_text())
    assert gd2["previous"] == day1.name and gd2["score"] == 100.0
    index2 = (day2 / "index.html").read_text()
    assert re.search(r'id="score-trend">\+25\.0<', index2)
    table = index2[index2.index('id="trend-table"') :]
    rows = re.findall(
        r"<tr><td>([^<]*)</td><td>[^<]*<span[^>]*>[^<]*</span></td><td>([^<]*)</td>"
        r".*?<td class=\"trend-(\w+)\">",
        table,
        re.S,
    )
    assert {(s, w): t for s, w, t in rows} == {
        ("ticker-freeze", "baseline"): "same",
        ("ticker-freeze", "after recovery"): "same",
        ("web-freeze", "during freeze-web"): "better",
        ("web-freeze", "after freeze-web"): "same",
    }, rows
