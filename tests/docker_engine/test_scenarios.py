"""Four scenarios of the library, time-scaled, with the stack as containers (--driver docker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultday.cluster.config import PART_OF_LABEL

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ["gpu-loss", "vector-store-outage", "tool-overload", "agent-crash"]
# As the issue asks. (tool-overload's baseline was 3 s of wall time at 0.1, which held
# 8-12 agent tasks; its warm-up and baseline are now long enough: see that scenario.)
TIME_SCALE = "0.1"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", SCENARIOS)
def test_library_scenario_passes_on_docker(
    name: str, engine: Any, nothing_left: Callable[[str], list[str]], tmp_path: Path
) -> None:
    report = Path(os.environ.get("FAULTDAY_DOCKER_REPORTS", tmp_path))
    argv = [sys.executable, "-m", "faultday.cli", "run", f"scenarios/{name}.scenario.yaml"]
    argv += ["--driver", "docker", "--time-scale", TIME_SCALE, "--report-dir", str(report)]
    t0 = time.monotonic()
    done = subprocess.run(
        [*argv, "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=840
    )
    took = time.monotonic() - t0
    runs = sorted(report.glob(f"*-{name}"))
    assert runs, done.stdout + done.stderr
    journal = json.loads((runs[-1] / "journal.json").read_text())
    print(f"{name} on docker: {journal['verdict']} in {took:.0f}s")  # the closing note's figure
    assert nothing_left(f"{PART_OF_LABEL}=faultday-local") == []
    assert journal["verdict"] == "passed", done.stdout[-3000:]
    assert done.returncode == 0
