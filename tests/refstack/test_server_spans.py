"""The Qdrant front and the tool server write a SERVER span per request, in the caller's trace."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.refstack.otlp import Got, Receiver, receiver

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(argv: list[str], env: dict[str, str], log: Path, *, ready: str = "") -> Iterator[str]:
    """Start one component (on a free ``--port`` unless ``ready`` is given); yields its URL
    once ``ready`` (default its /metrics) answers 200."""
    port = free_port()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv, *([] if ready else ["--port", str(port)])],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready or f"{url}/metrics", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        # SIGTERM first: PyTriton removes its /dev/shm segments and temporary folders on
        # an orderly stop, which a SIGKILL would leave behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def call(url: str) -> tuple[httpx.Response, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    r = httpx.get(url, headers={"traceparent": f"00-{trace_id}-{span_id}-01"}, timeout=10)
    return r, trace_id, span_id


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


def test_qdrant_front_span_per_request(rx: Receiver, tmp_path: Path) -> None:
    argv = ["faultday_refstack.vectordb", "--collection", "", "--data-dir", str(tmp_path / "q")]
    with server(argv, rx.env("qdrant"), tmp_path / "qdrant.log") as url:
        ok, ok_trace, ok_caller = call(f"{url}/collections/nope")
        assert ok.status_code == 404
        listed, list_trace, _ = call(f"{url}/collections")
        assert listed.status_code == 200
        got = rx.wait(lambda s: {ok_trace, list_trace} <= {x.trace_id for x in s})
    (missing,) = [s for s in got if s.trace_id == ok_trace]
    assert (missing.name, missing.kind, missing.service) == (
        "GET /collections/{name}",  # the route's template, never the raw path
        "SERVER",
        "qdrant",
    )
    assert missing.parent_id == ok_caller and missing.status == "UNSET"
    assert missing.attrs["http.response.status_code"] == 404
    (lst,) = [s for s in got if s.trace_id == list_trace]
    assert lst.name == "GET /collections" and lst.attrs["http.route"] == "/collections"


def test_tool_server_span_for_its_own_routes(rx: Receiver, tmp_path: Path) -> None:
    argv = ["faultday_refstack.tools", "--data-dir", str(tmp_path / "t")]
    with server(argv, rx.env("tools"), tmp_path / "tools.log") as url:
        r, trace_id, caller = call(f"{url}/health")
        assert r.status_code == 200
        got = rx.wait(lambda s: trace_id in {x.trace_id for x in s})
    (span,) = [s for s in got if s.trace_id == trace_id]
    assert (span.name, span.kind, span.service, span.parent_id) == (
        "GET /health",
        "SERVER",
        "tools",
        caller,
    )


def test_triton_spans_join_the_callers_trace(rx: Receiver, tmp_path: Path) -> None:
    """tritonserver's own tracing (OTLP/JSON) and PyTriton's: one tree under the caller."""
    ports = [str(free_port()) for _ in range(3)]
    argv = ["faultday_refstack.embedder", "--http-port", ports[0], "--grpc-port", ports[1]]
    argv += ["--metrics-port", ports[2]]
    url = f"http://127.0.0.1:{ports[0]}"
    # PyTriton's workspace and tritonserver's folders in a short folder of the test's own
    # (a ZeroMQ socket path holds 107 bytes), removed after: not loose in /tmp.
    scratch = Path(tempfile.mkdtemp(prefix="fd-triton-"))
    env = {**rx.env("triton"), "TMPDIR": str(scratch), "PYTRITON_HOME": str(scratch)}
    with (
        contextlib.ExitStack() as cleanup,
        server(argv, env, tmp_path / "triton.log", ready=f"{url}/v2/models/embedder/ready"),
    ):
        cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
        body = {
            "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}],
            "outputs": [{"name": "EMBEDDING"}],
        }
        r = httpx.post(
            f"{url}/v2/models/embedder/infer",
            json=body,
            headers={"traceparent": f"00-{trace_id}-{caller}-01"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        # Triton's own spans and PyTriton's arrive in separate posts: wait for the whole tree.
        got = rx.wait(lambda s: _one_tree(s, trace_id, caller))
    spans = [s for s in got if s.trace_id == trace_id]
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if s.parent_id not in ids]
    assert [(r.name, r.kind, r.service, r.parent_id) for r in roots] == [
        ("InferRequest", "SERVER", "triton", caller)
    ]


def _one_tree(got: list[Got], trace_id: str, caller: str) -> bool:
    spans = [s for s in got if s.trace_id == trace_id]
    ids = {s.span_id for s in spans}
    names = {s.name for s in spans}
    orphans = [s for s in spans if s.parent_id not in ids and s.parent_id != caller]
    return {"InferRequest", "proxy_inference_callable"} <= names and not orphans
