"""Fixtures: start real llmsim processes on 127.0.0.1 and always stop them by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

# Fast, predictable engine for tests: 2 ms steps, short fixed answers.
FAST = [
    "--step-base-ms",
    "2",
    "--decode-ms-per-seq",
    "0.05",
    "--prefill-ms-per-token",
    "0.01",
    "--attention-ms-per-ktoken",
    "0",
    "--output-len-dist",
    "fixed",
    "--output-len-mean",
    "20",
    "--watchdog-s",
    "1",
]


@dataclass
class Sim:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def metrics(self) -> dict[str, float]:
        """Sample name (with labels other than model_name/engine) → value."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                extra = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
                key = s.name + ("" if not extra else str(sorted(extra.items())))
                out[key] = s.value
        return out

    def fault(self, **body: object) -> dict[str, object]:
        resp = httpx.post(f"{self.url}/admin/faults", json=body, timeout=5)
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    def clear(self) -> None:
        httpx.delete(f"{self.url}/admin/faults", timeout=5).raise_for_status()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


SIM_PROGRAM = (sys.executable, "-m", "faultday_refstack.llmsim")


def launch(tmp: Path, *args: str, name: str = "sim", program: tuple[str, ...] = SIM_PROGRAM) -> Sim:
    """Start one simulator, wait until /health answers 200 (bounded)."""
    port_file = tmp / f"{name}.port"
    log = tmp / f"{name}.log"
    cmd = [
        *program,
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--model",
        "test-model",
        *args,
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmsim exited {proc.returncode}: {log.read_text()}")
        if port_file.exists() and port_file.read_text().strip():
            url = f"http://127.0.0.1:{port_file.read_text().strip()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return Sim(proc, url, log)
        time.sleep(0.05)
    _stop(proc)
    raise RuntimeError(f"llmsim did not become healthy: {log.read_text()}")


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    started: list[Sim] = []

    def start(*args: str, name: str = "sim", fast: bool = True) -> Sim:
        sim = launch(tmp_path, *([*FAST, *args] if fast else args), name=f"{name}{len(started)}")
        started.append(sim)
        return sim

    try:
        yield start
    finally:
        for sim in started:
            _stop(sim.proc)
