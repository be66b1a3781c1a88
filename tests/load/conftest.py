"""Real processes for load tests: the small OK server and the LLM simulator, on free ports."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

DATA = Path(__file__).parent / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=0.5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def _serve(argv: list[str], health: str, tmp_path: Path) -> Iterator[str]:
    proc = subprocess.Popen(
        argv, stdout=(tmp_path / "server.log").open("wb"), stderr=subprocess.STDOUT
    )
    try:
        base = health.rsplit("/", 1)[0] if health.count("/") > 2 else health
        _wait_http(health, proc)
        yield base
    finally:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def ok_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    yield from _serve(
        [sys.executable, str(DATA / "okserver.py"), str(port), str(tmp_path)],
        f"http://127.0.0.1:{port}/health",
        tmp_path,
    )


@pytest.fixture
def llmsim(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "faultday_refstack.llmsim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        "sim-test",
        "--log-level",
        "warning",
    ]
    yield from _serve(argv, f"http://127.0.0.1:{port}/health", tmp_path)
