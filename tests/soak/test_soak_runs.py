"""Two soaks of the same simulator under the same steady load, one with a real slow leak.

Each runs 60 scenario seconds at ``--time-scale 0.5`` (about 40 s of real time with
start-up): the leaking one must FAIL the rss drift check with the slope and its
interval in the report; the steady one must PASS it. Real processes on 127.0.0.1:
the simulator, Locust, the process sampler reading the simulator's RSS with psutil.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ROOT, faultday

DATA = ROOT / "tests" / "soak" / "data"
SLOPE = re.compile(r"slope ([+-][\d.]+) MiB/min, 95% CI \[([+-][\d.]+), ([+-][\d.]+)\]")
MIB = 2**20


def soak(tmp_path: Path, scenario: str) -> tuple[int, Path, dict[str, Any]]:
    for name in ("llm.stack.yaml", scenario):
        shutil.copy(DATA / name, tmp_path / name)
    r = faultday(
        "run",
        str(tmp_path / scenario),
        "--time-scale",
        "0.5",
        "--report-dir",
        str(tmp_path / "r"),
        timeout=240,
    )
    assert r.returncode in (0, 1), r.stderr[-3000:]
    (run_dir,) = (tmp_path / "r").iterdir()
    return r.returncode, run_dir, json.loads((run_dir / "journal.json").read_text())


def drift(journal: dict[str, Any], series: str) -> dict[str, Any]:
    (check,) = [c for c in journal["checks"] if c["label"] == f"drift {series}"]
    return check


def rss_series(run_dir: Path) -> dict[float, float]:
    with (run_dir / "timeseries.csv").open() as fh:
        return {
            float(row["t"]): float(row["value"]) / MIB
            for row in csv.DictReader(fh)
            if row["series"] == "proc_rss_bytes" and row["labels"] == "component=llm"
        }


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_a_leak_of_120_mib_a_minute_fails_the_rss_drift_check(tmp_path: Path) -> None:
    rc, run_dir, journal = soak(tmp_path, "leak.scenario.yaml")
    check = drift(journal, "rss llm")
    assert check["verdict"] == "failed", check
    assert rc == 1
    m = SLOPE.match(check["observed"])
    assert m is not None, check["observed"]
    slope, low, high = (float(g) for g in m.groups())
    assert 90 <= slope <= 150, check["observed"]  # 120 MiB a real minute, asked
    assert 30 < low <= slope <= high  # the whole interval above the 30 MiB/min margin
    assert check["observed"] in (run_dir / "report.md").read_text().replace("\\[", "[").replace(
        "\\]", "]"
    )
    assert (run_dir / "charts" / "rss.svg").exists()  # the report charts RSS per component
    # the revert gave the memory back: the last sample is near the first
    (fault,) = journal["faults"]
    assert fault["revert_ok"] is True
    rss = rss_series(run_dir)
    during = [v for t, v in rss.items() if fault["injected_at"] < t < fault["reverted_at"]]
    after = [v for t, v in rss.items() if t > fault["reverted_at"] + 0.5]
    before = [v for t, v in rss.items() if t < fault["injected_at"]]
    assert max(during) - min(before) > 35  # 27 real seconds at 2 MiB/s ≈ 54 MiB: held
    assert after and after[-1] - min(before) < 20, (before[:3], after)


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_the_same_soak_without_the_leak_passes(tmp_path: Path) -> None:
    rc, run_dir, journal = soak(tmp_path, "steady.scenario.yaml")
    assert [c["verdict"] for c in journal["checks"]] == ["passed"] * 4, journal["checks"]
    assert rc == 0
    check = drift(journal, "rss llm")
    m = SLOPE.match(check["observed"])
    assert m is not None, check["observed"]
    assert float(m.group(3)) < 30  # the whole interval below the margin
    (started,) = [e for e in journal["events"] if e["kind"] == "procs.started"]
    assert started["data"] == {"components": ["llm"], "without_pid": []}
    assert len(rss_series(run_dir)) >= 60
