"""`faultday stack up|status|down --driver docker` from a shell, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultday.cluster.config import PART_OF_LABEL
from faultday.core.ledger import Ledger

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}


def _stack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultday.cli", "stack", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        env=ENV,
    )


def test_stack_up_status_json_down_on_docker(
    engine: Any, nothing_left: Callable[[str], list[str]], tmp_path: Path
) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    try:
        up = _stack("up", "--driver", "docker", "--timeout", "300", *state)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "(docker)" in up.stdout
        status = _stack("status", "-o", "json", *state)
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        health = {c["name"]: c["health"] for c in info["components"]}
        assert set(health.values()) == {"ready"}, health
        assert all(c["url"].split("://")[1].startswith("127.0.0.1:") for c in info["components"])
    finally:
        down = _stack("down", *state)
    assert down.returncode == 0, down.stdout + down.stderr
    assert nothing_left(f"{PART_OF_LABEL}=faultday-local") == []
    assert Ledger.in_dir(tmp_path / "state").outstanding_cleanups() == []
    again = _stack("status", *state)
    assert again.returncode == 1 and "not up" in again.stdout
