"""Spans per relayed HTTP request: the proxy as a process, exporting to an OTLP receiver here."""

from __future__ import annotations

import gzip
import http.client
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from tests.proxy.conftest import free_port, stop, until, wait_http

from faultday.proxy.tracing import ENDPOINT_ENV, PROTOCOL_ENV

pytestmark = pytest.mark.timeout(90)

EDGE = "agent_llm"
TRACE_ID = secrets.token_hex(16)


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf bodies, spans kept in order."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            for rs in request.resource_spans:
                for attr in rs.resource.attributes:
                    if attr.key == "service.name":
                        self.services.add(attr.value.string_value)
                for ss in rs.scope_spans:
                    self.spans.extend(ss.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


@dataclass
class ProxyProc:
    api: str
    proc: subprocess.Popen[str]
    edge_port: int = 0

    def edge(self, upstream: str) -> int:
        r = httpx.post(
            f"{self.api}/proxies",
            json={"name": EDGE, "upstream": upstream, "listen": "127.0.0.1:0"},
            timeout=5,
        )
        r.raise_for_status()
        self.edge_port = int(r.json()["listen"].rsplit(":", 1)[1])
        return self.edge_port


def start_proxy(tmp_path: Path, env: dict[str, str]) -> ProxyProc:
    port = free_port()
    argv = [sys.executable, "-m", "faultday.proxy", "--port", str(port), "--log-level", "warning"]
    with (tmp_path / "proxy.log").open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    api = f"http://127.0.0.1:{port}"
    try:
        wait_http(api + "/version", proc=proc)
    except BaseException:
        stop(proc)
        raise
    return ProxyProc(api, proc)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "OTEL_BSP_SCHEDULE_DELAY": "100"}


class Client:
    """One keep-alive connection; each request carries its own client span id."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.sent: list[str] = []  # the client's span id of each request, in order

    def get(self, path: str) -> tuple[int, bytes, float]:
        span_id = secrets.token_hex(8)
        self.sent.append(span_id)
        t0 = time.monotonic()
        self.conn.request("GET", path, headers={"traceparent": f"00-{TRACE_ID}-{span_id}-01"})
        resp = self.conn.getresponse()
        body = resp.read()
        return resp.status, body, time.monotonic() - t0

    def close(self) -> None:
        self.conn.close()


def attrs(span: Span) -> dict[str, object]:
    def value(v: AnyValue) -> object:
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, kind) if kind else None

    return {a.key: value(a.value) for a in span.attributes}


def add_latency(api: str, ms: int) -> None:
    toxic = {"name": "lat", "type": "latency", "attributes": {"latency": ms, "jitter": 0}}
    httpx.post(f"{api}/proxies/{EDGE}/toxics", json=toxic, timeout=5).raise_for_status()


def test_one_span_per_request_parented_with_toxics_while_on(
    tmp_path: Path, receiver: Receiver, sse_server: str
) -> None:
    env = {**base_env(), ENDPOINT_ENV: receiver.url, PROTOCOL_ENV: "http/protobuf"}
    env["OTEL_SERVICE_NAME"] = "proxy"
    proxy = start_proxy(tmp_path, env)
    try:
        client = Client(proxy.edge(sse_server))
        try:
            got = [client.get("/hello"), client.get("/sse?n=5"), client.get("/status/503")]
            add_latency(proxy.api, 200)
            got.append(client.get("/hello?x=1"))
            httpx.delete(f"{proxy.api}/proxies/{EDGE}/toxics/lat", timeout=5).raise_for_status()
            got.append(client.get("/hello"))
        finally:
            client.close()
        assert [g[0] for g in got] == [200, 200, 503, 200, 200]
        assert got[1][1].count(b"data: ") == 6  # 5 tokens and [DONE], relayed whole
        assert until(lambda: len(receiver.spans) >= 5, timeout=10)
    finally:
        stop(proxy.proc)
    assert proxy.proc.returncode == 0
    spans = sorted(receiver.spans, key=lambda s: s.start_time_unix_nano)
    assert len(spans) == 5  # one per request, none for the API calls
    assert receiver.services == {"proxy"}
    for span, span_id in zip(spans, client.sent, strict=True):
        assert span.trace_id.hex() == TRACE_ID
        assert span.parent_span_id.hex() == span_id
        assert span.name == f"proxy {EDGE}"
        assert span.kind == Span.SpanKind.SPAN_KIND_INTERNAL
        a = attrs(span)
        assert a["fault.edge"] == EDGE
        assert f"{a['server.address']}:{a['server.port']}" == sse_server
        assert a["http.request.method"] == "GET"
        assert isinstance(a["http.request.size"], int)
        assert isinstance(a["http.response.size"], int)
        assert a["http.request.size"] > 0
        assert a["http.response.size"] > 0
    paths = [attrs(s)["url.path"] for s in spans]
    assert paths == ["/hello", "/sse", "/status/503", "/hello", "/hello"]
    assert [attrs(s)["http.response.status_code"] for s in spans] == [200, 200, 503, 200, 200]
    statuses = [s.status.code for s in spans]
    assert statuses[2] == Status.StatusCode.STATUS_CODE_ERROR
    assert attrs(spans[2])["error.type"] == "503"
    assert all(c != Status.StatusCode.STATUS_CODE_ERROR for i, c in enumerate(statuses) if i != 2)
    # The toxic shows only on the request made while it was on, and its latency is in the span.
    with_toxic = [i for i, s in enumerate(spans) if "fault.toxics" in attrs(s)]
    assert with_toxic == [3]
    lat = attrs(spans[3])
    assert lat["fault.toxics"] == "latency(latency=200,jitter=0)"
    assert lat["fault.toxic.latency_ms"] == 200
    assert lat["fault.toxic.types"] == ["latency"]
    duration = (spans[3].end_time_unix_nano - spans[3].start_time_unix_nano) / 1e9
    assert duration >= 0.2
    assert duration <= got[3][2] + 0.005  # within what the client saw (clocks: monotonic vs wall)
    for i in (0, 4):
        assert (spans[i].end_time_unix_nano - spans[i].start_time_unix_nano) / 1e9 < 0.2


def test_a_cut_stream_and_an_injected_error_are_errors(
    tmp_path: Path, receiver: Receiver, sse_server: str
) -> None:
    env = {**base_env(), ENDPOINT_ENV: receiver.url}
    proxy = start_proxy(tmp_path, env)
    try:
        port = proxy.edge(sse_server)
        cut = {"name": "cut", "type": "stream_cut", "attributes": {"after_events": 2}}
        httpx.post(f"{proxy.api}/proxies/{EDGE}/toxics", json=cut, timeout=5).raise_for_status()
        client = Client(port)
        try:
            with pytest.raises((http.client.HTTPException, ConnectionError)):
                client.get("/sse?n=50&interval_ms=5")
        finally:
            client.close()
        httpx.delete(f"{proxy.api}/proxies/{EDGE}/toxics/cut", timeout=5).raise_for_status()
        error = {"name": "err", "type": "http_error", "attributes": {"status": 429}}
        httpx.post(f"{proxy.api}/proxies/{EDGE}/toxics", json=error, timeout=5).raise_for_status()
        client = Client(port)
        try:
            assert client.get("/hello")[0] == 429
        finally:
            client.close()
        assert until(lambda: len(receiver.spans) >= 2, timeout=10)
    finally:
        stop(proxy.proc)
    spans = sorted(receiver.spans, key=lambda s: s.start_time_unix_nano)
    assert len(spans) == 2
    cut_span, error_span = (attrs(s) for s in spans)
    assert spans[0].status.code == Status.StatusCode.STATUS_CODE_ERROR
    assert cut_span["error.type"] == "stream_cut"
    assert cut_span["http.response.status_code"] == 200
    assert str(cut_span["fault.toxics"]).startswith("stream_cut(")
    assert spans[1].status.code == Status.StatusCode.STATUS_CODE_ERROR
    assert error_span["http.response.status_code"] == 429
    assert error_span["fault.injected_response"] is True
    assert error_span["error.type"] == "http_error"


def test_without_the_variable_no_span_and_the_same_relay(
    tmp_path: Path, receiver: Receiver, sse_server: str
) -> None:
    # The receiver listens, but nothing names it: the proxy must not export anything.
    proxy = start_proxy(tmp_path, base_env())
    try:
        client = Client(proxy.edge(sse_server))
        try:
            assert client.get("/hello")[0] == 200
            status, body, _ = client.get("/sse?n=3")
            assert status == 200
            assert body.count(b"data: ") == 4
        finally:
            client.close()
    finally:
        stop(proxy.proc)
    assert proxy.proc.returncode == 0
    time.sleep(0.3)  # longer than the schedule delay a traced proxy would export within
    assert receiver.spans == []


def test_a_protocol_it_cannot_export_is_a_usage_error(tmp_path: Path) -> None:
    env = {**base_env(), ENDPOINT_ENV: "http://127.0.0.1:9/v1/traces", PROTOCOL_ENV: "grpc"}
    argv = [sys.executable, "-m", "faultday.proxy", "--port", "0"]
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, check=False, env=env, cwd=tmp_path
    )
    assert out.returncode == 2
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='grpc'" in out.stderr
    assert "http/protobuf" in out.stderr
    assert "Traceback" not in out.stderr


def test_disabling_the_edge_mid_response_ends_its_span_as_an_outage(
    tmp_path: Path, receiver: Receiver, sse_server: str
) -> None:
    env = {**base_env(), ENDPOINT_ENV: receiver.url}
    proxy = start_proxy(tmp_path, env)
    try:
        client = Client(proxy.edge(sse_server))
        try:
            parent = {"traceparent": f"00-{TRACE_ID}-{'1' * 16}-01"}
            client.conn.request("GET", "/sse?n=200&interval_ms=20", headers=parent)
            resp = client.conn.getresponse()
            assert resp.read(1)  # the stream is under way
            r = httpx.post(f"{proxy.api}/proxies/{EDGE}", json={"enabled": False}, timeout=5)
            r.raise_for_status()
            with pytest.raises((http.client.HTTPException, ConnectionError)):
                resp.read()
        finally:
            client.close()
        # A disabled edge refuses connections: no request, so no span.
        with pytest.raises(ConnectionRefusedError):
            Client(proxy.edge_port).get("/hello")
        assert until(lambda: len(receiver.spans) >= 1, timeout=10)
    finally:
        stop(proxy.proc)
    assert len(receiver.spans) == 1
    span = receiver.spans[0]
    assert span.status.code == Status.StatusCode.STATUS_CODE_ERROR
    assert attrs(span)["error.type"] == "edge_disabled"
    assert attrs(span)["http.response.status_code"] == 200


def test_the_relay_carries_on_when_the_exporter_is_gone(
    tmp_path: Path, receiver: Receiver, sse_server: str
) -> None:
    proxy = start_proxy(tmp_path, {**base_env(), ENDPOINT_ENV: receiver.url})
    try:
        pid = proxy.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1  # the exporter process
        exporter = int(children[0])
        os.kill(exporter, signal.SIGKILL)  # our proxy's child: a crash of the exporter
        assert until(lambda: not Path(f"/proc/{exporter}").exists() or _zombie(exporter))
        client = Client(proxy.edge(sse_server))
        try:
            statuses = {client.get("/hello")[0] for _ in range(300)}  # > one flush batch
        finally:
            client.close()
        assert statuses == {200}
    finally:
        stop(proxy.proc)
    assert proxy.proc.returncode == 0
    assert "the exporter process is gone" in (tmp_path / "proxy.log").read_text()


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
