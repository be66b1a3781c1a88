"""Shared fixtures: the repo root, the faultday command, process-table hygiene."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
FAULTDAY = [sys.executable, "-m", "faultday.cli"]
T = TypeVar("T")


def faultday(
    *args: str, timeout: float = 120, cwd: Path = ROOT, **kw: object
) -> subprocess.CompletedProcess[str]:
    """Run the real ``faultday`` command; return its completed process."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [*FAULTDAY, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def wait_for(pred: Callable[[], T | None], timeout: float, what: str, *, every: float = 0.05) -> T:
    """Poll ``pred`` until it returns something truthy (returned); AssertionError on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``text`` (a test's own tmp folder)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if text in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Fail a test that leaves behind a process started for it.

    The machine is shared, so only processes whose command line names this
    test's tmp folder are counted (every test component puts its run folder,
    which lives there, on its command line).
    """
    yield
    # One still exiting on its own (seen as it turned zombie) is not left behind: give it 2 s.
    _gone, left = psutil.wait_procs(processes_mentioning(str(tmp_path)), timeout=2)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not left, f"processes left behind: {[p.pid for p in left]}"


# Scenario files used as test data are not themselves test items of this suite.
collect_ignore_glob = ["engine/data/*", "scenario/broken/*", "soak/data/*"]
