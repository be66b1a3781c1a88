"""Fixtures for the trace collector's tests: collector processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.stack.conftest import make_stack  # noqa: F401 - the stack suite's fixture, shared

from faultday.observe.collector import READY_PREFIX, STATS_PATH, TRACES_PATH

START_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class RunningCollector:
    proc: subprocess.Popen[str]
    base_url: str
    db: Path

    @property
    def otlp_url(self) -> str:
        return self.base_url + TRACES_PATH

    def stats(self) -> dict[str, int]:
        doc: dict[str, int] = httpx.get(self.base_url + STATS_PATH, timeout=5).json()
        return doc


def _ready_url(proc: subprocess.Popen[str]) -> str:
    """The base URL from the collector's ready line, waited for at most START_TIMEOUT_S."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(READY_PREFIX):
            otlp = next(w for w in line.split() if w.startswith("otlp="))
            return otlp.removeprefix("otlp=").removesuffix(TRACES_PATH)
    raise AssertionError(f"the collector did not start (exit {proc.poll()})")


StartCollector = Callable[..., RunningCollector]


@pytest.fixture
def start_collector(tmp_path: Path) -> Iterator[StartCollector]:
    """Start collector processes (``--port 0``); each is stopped by its PID afterwards."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, db: Path | None = None) -> RunningCollector:
        db = db or tmp_path / f"spans{len(procs)}.db"
        argv = [sys.executable, "-m", "faultday.observe.collector", "--port", "0"]
        proc = subprocess.Popen(
            [*argv, "--db", str(db), "--log-level", "warning", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        return RunningCollector(proc=proc, base_url=_ready_url(proc), db=db)

    try:
        yield start
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            with contextlib.suppress(ValueError):
                if p.stdout is not None:
                    p.stdout.close()


@pytest.fixture
def collector(start_collector: StartCollector) -> RunningCollector:
    return start_collector()
