"""Real processes for agent-stack tests: redis-server, llmsim, the tool server, the runtime."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """One child process, started with its log in the test's tmp folder; killed by PID."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        fh = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        fh.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def wait_http(self, url: str, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready at {url}: {self.log.read_text()[-2000:]}")


class Procs:
    """Everything one test started; ``close`` kills all of it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.all: list[Proc] = []

    def close(self) -> None:
        for p in reversed(self.all):
            p.kill()

    def _proc(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        # Temporary files of a SIGKILLed child stay in the test's folder, not in /tmp.
        tmpdir = self.tmp / "tmp"
        tmpdir.mkdir(exist_ok=True)
        p = Proc(name, argv, self.tmp / f"{name}.log", {"TMPDIR": str(tmpdir), **(env or {})})
        self.all.append(p)
        return p

    def redis(self, port: int | None = None) -> tuple[Proc, str]:
        port = port or free_port()
        d = self.tmp / f"redis-{port}"
        d.mkdir(exist_ok=True)
        p = self._proc(
            f"redis-{port}",
            [
                "redis-server",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(d),
            ],
        ).start()
        url = f"redis://127.0.0.1:{port}/0"
        end = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url, socket_timeout=1).ping()
                return p, url
            except redis.RedisError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)

    def llmsim(
        self, model: str, *extra: str, env: dict[str, str] | None = None
    ) -> tuple[Proc, str]:
        port = free_port()
        p = self._proc(
            f"llm-{model}",
            [
                PY,
                "-m",
                "faultday_refstack.llmsim",
                "--port",
                str(port),
                "--model",
                model,
                "--speed",
                "50",
                "--output-len-mean",
                "12",
                "--port-file",
                str(self.tmp / f"llm-{model}.port"),
                *extra,
            ],
            env,
        ).start()
        url = f"http://127.0.0.1:{port}"
        p.wait_http(url + "/health")
        return p, url

    def tools(self, *extra: str, env: dict[str, str] | None = None) -> tuple[Proc, str]:
        port = free_port()
        p = self._proc(
            "tools",
            [
                PY,
                "-m",
                "faultday_refstack.tools",
                "--port",
                str(port),
                "--data-dir",
                str(self.tmp / "tools-data"),
                *extra,
            ],
            env,
        ).start()
        url = f"http://127.0.0.1:{port}"
        p.wait_http(url + "/health")
        return p, url

    def agent(
        self,
        *,
        urls: dict[str, str],
        policy: str = "default",
        port: int | None = None,
        config: Path | None = None,
        name: str = "agent",
        env: dict[str, str] | None = None,
        traces: bool = True,
    ) -> tuple[Proc, str]:
        port = port or free_port()
        argv = [
            PY,
            "-m",
            "faultday_refstack.agent",
            "--port",
            str(port),
            "--config",
            str(config or REPO / "stack" / "agent.yaml"),
            "--policy",
            policy,
            *(["--traces", str(self.tmp / "traces.jsonl")] if traces else []),
            "--audit",
            str(self.tmp / "audit.jsonl"),
        ]
        for k, v in urls.items():
            argv += [f"--{k}", v]
        p = self._proc(name, argv, env).start()
        url = f"http://127.0.0.1:{port}"
        p.wait_http(url + "/health")
        return p, url


def dead_url() -> str:
    """An address nothing listens on (a dependency that is down)."""
    return f"http://127.0.0.1:{free_port()}"
