"""Fixtures for the proxy tests: real servers on 127.0.0.1, each stopped by PID."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from faultday.proxy import ProxyServer, native
from faultday.proxy.client import ToxiproxyClient

HERE = Path(__file__).resolve().parent
REAL_SKIP = (
    "toxiproxy-server not on PATH: the real-Toxiproxy comparison half is skipped "
    "(faultday's proxy half ran)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, *, timeout: float = 20.0, proc: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1.0)
        except httpx.HTTPError:
            time.sleep(0.05)
        else:
            return
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class EchoServer:
    """A threaded TCP echo server (the upstream of most toxic tests)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self.addr = f"127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._thread.join(5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def inproc() -> Iterator[ProxyServer]:
    """faultday's proxy server on a background thread of this process."""
    server = ProxyServer().start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class ApiServer:
    kind: str  # "faultday" or "toxiproxy"
    api_url: str
    host: str
    port: int


def _spawn(
    argv: list[str], api_url: str, ready_line: str | None, log: Path
) -> subprocess.Popen[str]:
    # Output goes to a file, never to an unread pipe: toxiproxy-server logs a JSON
    # line per request and connection and blocks every goroutine once a pipe is full.
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=HERE)
    try:
        wait_http(api_url + "/version", proc=proc)
        if ready_line is not None:
            deadline = time.monotonic() + 5
            while not log.read_text().startswith(ready_line):
                assert time.monotonic() < deadline, f"no readiness line in {log}"
                time.sleep(0.02)
    except BaseException:
        stop(proc)
        raise
    return proc


@pytest.fixture(scope="module", params=["faultday", "toxiproxy"])
def api_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """A Toxiproxy-API server as a process: ``python -m faultday.proxy`` or the real one."""
    port = free_port()
    log = tmp_path_factory.mktemp("api-server") / f"{request.param}.log"
    url = f"http://127.0.0.1:{port}"
    if request.param == "toxiproxy":
        binary = shutil.which("toxiproxy-server")
        if binary is None:
            pytest.skip(REAL_SKIP)
        proc = _spawn([binary, "-host", "127.0.0.1", "-port", str(port)], url, None, log)
    else:
        argv = [
            sys.executable,
            "-m",
            "faultday.proxy",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        proc = _spawn(argv, url, "faultday-proxy ready", log)
    try:
        yield ApiServer(request.param, url, "127.0.0.1", port)
    finally:
        stop(proc)


@pytest.fixture
def client(api_server: ApiServer) -> Iterator[ToxiproxyClient]:
    with ToxiproxyClient(api_server.api_url) as c:
        for name in c.proxies():
            c.delete_proxy(name)
        yield c
        for name in c.proxies():
            c.delete_proxy(name)


@pytest.fixture(scope="module")
def sse_server() -> Iterator[str]:
    """uvicorn serving proxy_sse_app (keep-alive, chunked streaming responses)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "proxy_sse_app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--app-dir",
        str(HERE),
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/hello", proc=proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


def until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``cond`` until true or ``timeout``; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# The relay tests run each case on both relays: the native one (where built) and Python's.
@pytest.fixture(params=["native", "python"])
def server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ProxyServer]:
    if request.param == "native" and not native.available():
        pytest.skip("the native relay is not built here (no C compiler)")
    monkeypatch.setenv(native.ENV_SWITCH, "1" if request.param == "native" else "0")
    srv = ProxyServer().start()
    try:
        assert (srv.relay is not None) is (request.param == "native")
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server: ProxyServer) -> Iterator[ToxiproxyClient]:
    with ToxiproxyClient(server.api_url) as c:
        yield c


@pytest.fixture
def edge(api: ToxiproxyClient, echo: EchoServer) -> int:
    return api.create_proxy("edge", upstream=echo.addr).port
