"""``faultday proxy serve`` (the typer app the lead mounts) with a Toxiproxy-style config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from tests.proxy.conftest import EchoServer, free_port, stop, wait_http


def test_serve_with_config_then_sigterm(tmp_path: Path, echo: EchoServer) -> None:
    config = tmp_path / "proxies.json"
    config.write_text(json.dumps([{"name": "redis", "upstream": echo.addr}]))
    port = free_port()
    code = "from faultday.proxy.cli import app; app()"
    argv = [sys.executable, "-c", code, "serve", "--port", str(port), "--config", str(config)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("faultday-proxy ready api=http://127.0.0.1:"), line
        assert "proxies=1" in line
        wait_http(f"http://127.0.0.1:{port}/version", proc=proc)
        proxies = httpx.get(f"http://127.0.0.1:{port}/proxies", timeout=5).json()
        assert proxies["redis"]["upstream"] == echo.addr
        assert proxies["redis"]["enabled"] is True
    finally:
        stop(proc)
    assert proc.returncode == 0  # SIGTERM is a clean shutdown


def test_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "proxies.json"
    config.write_text('[{"name": "x"}]')
    argv = [sys.executable, "-m", "faultday.proxy", "--port", "0", "--config", str(config)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert "upstream" in out.stderr


def test_config_with_a_bad_listen_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "proxies.json"
    config.write_text('[{"name": "x", "upstream": "127.0.0.1:1", "listen": "bogus"}]')
    argv = [sys.executable, "-m", "faultday.proxy", "--port", "0", "--config", str(config)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert "error: proxy x: 'bogus' is not host:port" in out.stderr
    assert "Traceback" not in out.stderr
