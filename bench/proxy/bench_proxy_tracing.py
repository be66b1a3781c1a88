"""Proxy tracing benchmark: relayed HTTP requests/s with tracing off and on, in one run.

    .venv/bin/python bench/proxy/bench_proxy_tracing.py [--seconds 3] [--blocks 6] [--conns 32]

Two ``python -m faultday.proxy`` processes relay to the same upstream: one without
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (tracing off) and one with it, exporting
to an OTLP/HTTP sink (a child process that decodes each batch and counts its
spans). Every request carries a sampled ``traceparent``, so with tracing on each
one makes a span. Blocks alternate off/on (each going first in every other
round) so machine noise hits both; the figures are medians over blocks. Two
measures: requests/s through each proxy (``conns`` keep-alive connections, one
request at a time each, from one epoll client) and the proxy process's own CPU
time per request (``/proc/<pid>/stat``), which the rest of the machine's load
disturbs less. Target: tracing on keeps ≥ 0.95 of the requests/s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx

TARGET_RATIO = 0.95
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REQUEST = (
    b"GET /v1/items?q=1 HTTP/1.1\r\nHost: bench\r\n"
    b"traceparent: 00-" + TRACE_ID.encode() + b"-00f067aa0ba902b7-01\r\n\r\n"
)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- children ---------------------------------------------------------------------------
def serve_upstream() -> None:
    """Keep-alive HTTP/1.1 on one epoll thread: a fixed answer per request head."""
    lsock = socket.create_server(("127.0.0.1", 0), backlog=512)
    print(lsock.getsockname()[1], flush=True)
    ep = select.epoll()
    ep.register(lsock.fileno(), select.EPOLLIN)
    conns: dict[int, tuple[socket.socket, bytearray]] = {}
    while True:
        for fd, _ev in ep.poll():
            if fd == lsock.fileno():
                c, _ = lsock.accept()
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[c.fileno()] = (c, bytearray())
                ep.register(c.fileno(), select.EPOLLIN)
                continue
            c, buf = conns[fd]
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                ep.unregister(fd)
                del conns[fd]
                c.close()
                continue
            buf += data
            answers = 0
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                del buf[: end + 4]
                answers += 1
            if answers:
                c.sendall(RESPONSE * answers)


def serve_sink() -> None:
    """An OTLP/HTTP trace receiver that counts spans; prints the count on SIGTERM."""
    # Imported here: only this child decodes OTLP.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: PLC0415
        ExportTraceServiceRequest,
    )

    counts = {"spans": 0, "posts": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            req = ExportTraceServiceRequest.FromString(body)
            counts["posts"] += 1
            counts["spans"] += sum(
                len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans
            )
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)

    def done(_sig: int, _frame: object) -> None:
        print(json.dumps(counts), flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, done)
    print(server.server_address[1], flush=True)
    server.serve_forever()


# ---- the run ----------------------------------------------------------------------------
@contextlib.contextmanager
def child(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{proc.args}: exited before its readiness line")
    return line.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_proxy(stack: contextlib.ExitStack, env: dict[str, str], upstream: int) -> tuple[int, int]:
    """A proxy process with one edge to ``upstream``: (its pid, the edge's port)."""
    api = free_port()
    argv = [sys.executable, "-m", "faultday.proxy", "--port", str(api), "--log-level", "warning"]
    proc = stack.enter_context(child(argv, env))
    if not first_line(proc).startswith("faultday-proxy ready"):
        raise RuntimeError("the proxy did not start")
    r = httpx.post(
        f"http://127.0.0.1:{api}/proxies",
        json={"name": "bench", "upstream": f"127.0.0.1:{upstream}", "listen": "127.0.0.1:0"},
        timeout=5,
    )
    r.raise_for_status()
    return proc.pid, int(r.json()["listen"].rsplit(":", 1)[1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def exporter_pid(proxy_pid: int) -> int:
    """The traced proxy's exporter process (its only child)."""
    with open(f"/proc/{proxy_pid}/task/{proxy_pid}/children") as f:
        return int(f.read().split()[0])


def settled_cpu(pid: int, *, limit: float = 30.0) -> float:
    """The process's CPU seconds once it has been idle for 1 s (it exports behind the relay)."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - last < 0.02:
            return now
        last = now
    return last


def throughput(port: int, *, conns: int, seconds: float) -> int:
    """Requests completed in ``seconds``: ``conns`` keep-alive connections, one at a time each."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(conns)]
    ep = select.epoll()
    left: dict[int, int] = {}
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        ep.register(s.fileno(), select.EPOLLIN)
        left[s.fileno()] = len(RESPONSE)
        s.send(REQUEST)
    by_fd = {s.fileno(): s for s in socks}
    done = 0
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            for fd, _ev in ep.poll(0.5):
                try:
                    data = by_fd[fd].recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    raise ConnectionError("the proxy closed a connection")
                left[fd] -= len(data)
                if left[fd] <= 0:
                    done += 1
                    left[fd] = len(RESPONSE)
                    by_fd[fd].send(REQUEST)
    finally:
        ep.close()
        for s in socks:
            s.close()
    return done


def block(pid: int, port: int, *, conns: int, seconds: float) -> tuple[int, float, float]:
    """(requests, requests/s, proxy CPU µs per request) of one block."""
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    done = throughput(port, conns=conns, seconds=seconds)
    took, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return done, done / took, cpu / max(done, 1) * 1e6


def run(args: argparse.Namespace) -> dict[str, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with contextlib.ExitStack() as stack:
        upstream = int(
            first_line(stack.enter_context(child([sys.executable, __file__, "--upstream"])))
        )
        sink = stack.enter_context(child([sys.executable, __file__, "--sink"]))
        sink_port = int(first_line(sink))
        traced_env = {
            **base,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{sink_port}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "proxy",
        }
        proxies = {
            "off": start_proxy(stack, base, upstream),
            "on": start_proxy(stack, traced_env, upstream),
        }
        if args.before is not None:  # faultday's source before tracing, for "off changes nothing"
            before_env = {**base, "PYTHONPATH": str(args.before)}
            proxies["before"] = start_proxy(stack, before_env, upstream)
        modes = list(proxies)
        requests = dict.fromkeys(modes, 0)
        for mode, (pid, port) in proxies.items():  # warm-up: connections, the exporter's session
            requests[mode] += block(pid, port, conns=args.conns, seconds=1.0)[0]
        rps: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(args.blocks):
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:  # each first in turn
                n, r, c = block(*proxies[mode], conns=args.conns, seconds=args.seconds)
                requests[mode] += n
                rps[mode].append(r)
                cpu[mode].append(c)
        exporter_cpu = settled_cpu(exporter_pid(proxies["on"][0]))
        os.kill(proxies["on"][0], signal.SIGTERM)
        time.sleep(3.0)  # its shutdown flushes the BatchSpanProcessor's queue to the sink
        sink.send_signal(signal.SIGTERM)
        counts = json.loads(first_line(sink))
    off, on = statistics.median(rps["off"]), statistics.median(rps["on"])
    cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    extra = {}
    if "before" in rps:
        before = statistics.median(rps["before"])
        extra = {
            "rps_before": before,
            "ratio_off_before": off / before,
            "cpu_us_before": statistics.median(cpu["before"]),
        }
    return extra | {
        "rps_off": off,
        "rps_on": on,
        "ratio": on / off,
        "cpu_us_off": cpu_off,
        "cpu_us_on": cpu_on,
        "cpu_us_added": cpu_on - cpu_off,
        "spans_exported": counts["spans"],
        "exporter_cpu_us_per_span": exporter_cpu / max(counts["spans"], 1) * 1e6,
        "requests_traced": requests["on"],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sink", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per mode")
    parser.add_argument("--conns", type=int, default=32)
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a faultday src/ folder from before tracing: a third proxy, tracing off, from it",
    )
    args = parser.parse_args()
    if args.upstream:
        serve_upstream()
        return 0
    if args.sink:
        serve_sink()
        return 0
    res = run(args)
    verdict = "pass" if res["ratio"] >= TARGET_RATIO else "MISS"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(json.dumps(res, indent=2))
    print(
        f"\n{now}; {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; Python {platform.python_version()}\n"
        f"| tracing | requests/s | proxy CPU µs/request |\n|---|---|---|\n"
        f"| off | {res['rps_off']:.0f} | {res['cpu_us_off']:.1f} |\n"
        f"| on | {res['rps_on']:.0f} | {res['cpu_us_on']:.1f} |\n"
        f"| on / off | {res['ratio']:.3f} ({verdict}, target ≥ {TARGET_RATIO}) | "
        f"{res['cpu_us_added']:+.1f} |\n"
        + (
            f"| before tracing existed (--before) | {res['rps_before']:.0f} | "
            f"{res['cpu_us_before']:.1f} |\n"
            f"| off / before | {res['ratio_off_before']:.3f} | "
            f"{res['cpu_us_off'] - res['cpu_us_before']:+.1f} |\n"
            if "rps_before" in res
            else ""
        )
        + f"spans exported: {res['spans_exported']} of {res['requests_traced']} traced requests; "
        f"the exporter process's CPU per span: {res['exporter_cpu_us_per_span']:.0f} µs"
    )
    return 0 if verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
