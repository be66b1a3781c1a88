"""Is llmsim ever the bottleneck? Many concurrent SSE streams vs the engine model's prediction.

Starts one simulator pinned to one CPU core, opens N streaming completions
(arrivals spread evenly over a ramp), records when every token arrives at a
light raw-socket client (pinned to another core), then replays the very same
arrivals through the engine model in virtual time (no I/O) and compares:
time to first token and inter-token latency, measured vs predicted.

    .venv/bin/python bench/llmsim/bench_streams.py --requests 512 --ramp 4 --max-tokens 128

Prints a JSON summary; exit status 1 when a criterion (within 5 % or 2 ms) fails.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from faultday_refstack.llmsim.config import SimConfig
from faultday_refstack.llmsim.engine import Engine, FinishReason, SimRequest
from faultday_refstack.llmsim.text import tokenize


@dataclass
class Measured:
    prompt: str
    sent: float = 0.0
    events: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens)
    error: str = ""

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.events)

    def ttft(self) -> float:
        return self.events[0][0] - self.sent

    def itl(self) -> float:
        # Mean inter-token latency of the request, as vLLM's benchmark computes it.
        first, last = self.events[0][0], self.events[-1][0]
        return (last - first) / max(1, self.tokens - 1)


def _request_bytes(port: int, m: Measured, max_tokens: int, model: str) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "prompt": m.prompt,
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    return head + body


def drive(port: int, requests: list[Measured], ramp: float, max_tokens: int, model: str) -> None:
    """One thread, one epoll: every read is time-stamped the moment it returns.

    Parsing waits until the end, so a burst of a hundred streams' tokens is
    stamped within a fraction of a millisecond (an asyncio client adds
    milliseconds of its own queueing to every first token, which is not llmsim's).
    """
    gap = ramp / max(1, len(requests) - 1)
    payloads = [_request_bytes(port, m, max_tokens, model) for m in requests]
    reads: dict[int, list[tuple[float, bytes]]] = {i: [] for i in range(len(requests))}
    sel = selectors.DefaultSelector()
    start = time.monotonic() + 0.05
    nxt = 0
    open_socks = 0
    deadline = start + ramp + 600
    while (nxt < len(requests) or open_socks) and time.monotonic() < deadline:
        now = time.monotonic()
        while nxt < len(requests) and now >= start + nxt * gap:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            requests[nxt].sent = time.monotonic()
            sock.sendall(payloads[nxt])
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ, nxt)
            open_socks += 1
            nxt += 1
            now = time.monotonic()
        timeout = max(0.0, start + nxt * gap - now) if nxt < len(requests) else 1.0
        for key, _ in sel.select(timeout):
            data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
            t = time.monotonic()
            if data:
                reads[key.data].append((t, data))
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
                open_socks -= 1
    for i, m in enumerate(requests):
        _parse_stream(m, reads[i])


def _parse_stream(m: Measured, reads: list[tuple[float, bytes]]) -> None:
    """Split the chunked SSE body into events, each stamped with the read that completed it."""
    raw = b"".join(d for _, d in reads)
    ends = list(itertools.accumulate(len(d) for _, d in reads))
    times = [t for t, _ in reads]
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0 or b" 200 " not in raw[: raw.find(b"\r\n")]:
        m.error = raw[:200].decode(errors="replace")
        return
    pos = head_end + 4
    while pos < len(raw):
        line_end = raw.index(b"\r\n", pos)
        size = int(raw[pos:line_end], 16)
        if size == 0:
            break
        chunk_end = line_end + 2 + size
        chunk = raw[line_end + 2 : chunk_end]
        t = times[bisect.bisect_left(ends, chunk_end)]
        n = 0
        for event in chunk.split(b"\n\n"):
            if event.startswith(b'data: {"id"'):
                n += len(json.loads(event[6:])["choices"][0]["text"].split())
        if n:
            m.events.append((t, n))
        pos = chunk_end + 2


def predict(config: SimConfig, requests: list[Measured], max_tokens: int) -> list[SimRequest]:
    """Replay the measured arrivals through the engine model in virtual time."""
    engine = Engine(config)
    sims = [
        SimRequest(f"r{i}", tokenize(m.prompt), max_tokens, FinishReason.LENGTH, m.sent)
        for i, m in enumerate(requests)
    ]
    pending = sorted(sims, key=lambda s: s.arrival)
    t = pending[0].arrival
    i = 0
    for _ in range(10_000_000):
        while i < len(pending) and pending[i].arrival <= t:
            engine.add(pending[i])
            i += 1
        if not engine.has_work:
            if i == len(pending):
                break
            t = pending[i].arrival
            continue
        plan = engine.plan(t)
        t += plan.duration
        engine.commit(plan, t)
    return sims


def within(measured: float, predicted: float) -> bool:
    return abs(measured - predicted) <= max(0.05 * predicted, 0.002)


def summarize(requests: list[Measured], sims: list[SimRequest]) -> dict[str, object]:
    ok = [(m, s) for m, s in zip(requests, sims, strict=True) if m.events and not m.error]
    mt = [m.ttft() for m, _ in ok]
    pt = [s.first_token - s.arrival for _, s in ok]
    mi = [m.itl() for m, _ in ok]
    pi = [(s.last_token - s.first_token) / max(1, s.num_output - 1) for _, s in ok]
    err_t = sorted(abs(a - b) for a, b in zip(mt, pt, strict=True))
    err_i = sorted(abs(a - b) for a, b in zip(mi, pi, strict=True))

    def q(v: list[float], p: float) -> float:
        return sorted(v)[min(len(v) - 1, int(p * len(v)))]

    res: dict[str, object] = {
        "requests_ok": len(ok),
        "requests_failed": len(requests) - len(ok),
        "tokens_received": sum(m.tokens for m, _ in ok),
        "ttft_mean_ms": {
            "measured": statistics.fmean(mt) * 1e3,
            "predicted": statistics.fmean(pt) * 1e3,
        },
        "ttft_p90_ms": {"measured": q(mt, 0.9) * 1e3, "predicted": q(pt, 0.9) * 1e3},
        "itl_mean_ms": {
            "measured": statistics.fmean(mi) * 1e3,
            "predicted": statistics.fmean(pi) * 1e3,
        },
        "per_request_abs_err_ms": {
            "ttft_p50": q(err_t, 0.5) * 1e3,
            "ttft_p95": q(err_t, 0.95) * 1e3,
            "itl_p50": q(err_i, 0.5) * 1e3,
            "itl_p95": q(err_i, 0.95) * 1e3,
        },
    }
    res["pass_ttft_mean"] = within(statistics.fmean(mt), statistics.fmean(pt))
    res["pass_itl_mean"] = within(statistics.fmean(mi), statistics.fmean(pi))
    res["pass_ttft_p90"] = within(q(mt, 0.9), q(pt, 0.9))
    # Per request, which step admits a request flips on sub-millisecond arrival
    # differences, so individual TTFTs differ by up to a step either way; the
    # distributions are what the model promises, and what is judged.
    return res


def start_server(args: argparse.Namespace, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    port_file = tmp / "port"
    # nice -n -10: the machine is shared; without it the kernel's scheduling delays of
    # other people's processes dominate what is measured (see bench/RESULTS.md).
    nice = ["nice", "-n", str(args.nice)] if args.nice else []
    cmd = [
        *nice,
        "taskset",
        "-c",
        str(args.server_cpu),
        sys.executable,
        "-m",
        "faultday_refstack.llmsim",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--model",
        "bench",
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--log-level",
        "warning",
        "--loop",
        args.loop,
    ]
    proc = subprocess.Popen(cmd, stderr=(tmp / "server.log").open("wb"), start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text())
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return proc, port
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("llmsim did not start: " + (tmp / "server.log").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--ramp", type=float, default=4.0, help="seconds over which requests start")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--loop", default="auto", help="the server's event loop")
    ap.add_argument("--nice", type=int, default=0, help="niceness of server and client (root)")
    args = ap.parse_args()
    config = SimConfig(model="bench", max_num_seqs=args.max_num_seqs)
    requests = [
        Measured(f"request {i}: " + " ".join(f"word{(i * 31 + k) % 997}" for k in range(40)))
        for i in range(args.requests)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(args, Path(tmp))
        try:
            os.sched_setaffinity(0, {args.client_cpu})
            if args.nice:
                os.nice(args.nice)
            server = psutil.Process(proc.pid)
            cpu0, wall0 = server.cpu_times(), time.monotonic()
            drive(port, requests, args.ramp, args.max_tokens, "bench")
            cpu1, wall1 = server.cpu_times(), time.monotonic()
            stats = httpx.get(f"http://127.0.0.1:{port}/admin/stats", timeout=5).json()
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    sims = predict(config, requests, args.max_tokens)
    out = summarize(requests, sims)
    busy = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)
    peak = max(
        len([s for s in sims if s.first_scheduled <= t < s.last_token])
        for t in [m.sent for m in requests]
    )
    out.update(
        {
            "server_cpu_busy_fraction_of_one_core": round(busy, 3),
            "peak_running_streams_predicted": peak,
            "server_max_step_lag_ms": stats["max_lag_s"] * 1e3,
            "server_lag_resets": stats["lag_resets"],
            "wall_s": round(wall1 - wall0, 2),
            "args": vars(args),
        }
    )
    print(json.dumps(out, indent=2))
    passed = out["pass_ttft_mean"] and out["pass_itl_mean"] and out["pass_ttft_p90"]
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
