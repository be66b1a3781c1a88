"""Tracing benchmark: what distributed tracing costs a real run, and what one collector takes.

    .venv/bin/python bench/tracing/bench_tracing.py [--rounds 2] [--seconds 30] [--users 16]
                                                    [--senders 3] [--ingest-seconds 8]
                                                    [--only tracing|ingest] [--keep DIR]

1. **On vs off, same load.** ``faultday run`` of one short steady-state scenario (RAG chat,
   no faults) on the real ``local`` stack, alternately with tracing on (the profile as
   shipped, with its collector, and ``spec.traces.enabled: true``) and off (the same profile
   written without its collector, so no component gets an ``OTEL_*`` variable, and
   ``spec.traces.enabled: false``), ABBA-ordered rounds so drift hits both. Each run's
   steady-state figures come from its own journal: the ``throughput`` check (successful
   requests/s) and the ``latency`` check (exact e2e p99 from the load's raw records). While
   it runs, the bench samples the CPU time of every process under ``faultday run`` (the
   stack, the load, the harness) every 0.5 s, so each run also gives CPU seconds per request
   in the steady-state window: on this shared 2-vCPU machine that figure moves less with
   the neighbours than requests/s does, and split by process (``python -m`` module or
   program) it says where tracing's CPU goes. Target: on keeps >= 0.95 of off's
   requests/s and its p99 is <= 1.05 x off's (medians over runs). The RAG load is closed
   (``--users`` each waiting for its answer, the simulated LLMs' decode setting the pace),
   so until the CPUs saturate tracing shows in CPU per request before it shows in
   requests/s; raise ``--users`` to push the stack towards saturation.
2. **Collector ingest.** One ``python -m faultday.observe.collector`` process, several
   sender processes posting the same pre-encoded OTLP protobuf body (512 spans,
   ``faultday.core.otlp.encode``) in a loop with httpx: spans accepted per second (its
   ``/stats``) and the collector's CPU per span (``/proc``).

Prints JSON and a small table; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil
import yaml

from faultday.core.durations import to_seconds
from faultday.core.journal import Journal, read_journal
from faultday.core.otlp import CONTENT_PROTOBUF, encode
from faultday.core.spans import Span, SpanKind

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "stack" / "local.yaml"
TARGET_RPS_RATIO = 0.95  # tracing on keeps at least this share of requests/s
TARGET_P99_RATIO = 1.05  # and its e2e p99 is at most this multiple
SPANS_PER_BODY = 512
COLLECTOR = "faultday.observe.collector"


# ---- 1. tracing on vs off ---------------------------------------------------------------
def write_inputs(folder: Path, *, seconds: float, users: int) -> dict[str, Path]:
    """The two scenarios (on, off) and the collector-less profile beside them."""
    doc = yaml.safe_load(PROFILE.read_text())
    collector = doc["spec"].pop("collector")
    del doc["spec"]["components"][collector]
    (folder / "local-untraced.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(PROFILE.parent / "agent.yaml", folder / "agent.yaml")  # its {profile_dir}
    out = {}
    for mode, stack, enabled in (
        ("on", str(PROFILE), True),
        ("off", str(folder / "local-untraced.yaml"), False),
    ):
        scenario = {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": f"bench-tracing-{mode}"},
            "spec": {
                "stack": stack,
                "duration": f"{seconds}s",
                "warmup": "8s",
                "load": {"workload": "rag", "users": users, "spawn_rate": users},
                "traces": {"enabled": enabled},
                "steady_state": [  # loose bounds: the journal records the measured values
                    {"check": "throughput", "min": 0.01},
                    {"check": "latency", "metric": "e2e", "percentile": 99, "max": "600s"},
                    {"check": "error_rate", "max": 1.0},
                ],
            },
        }
        path = folder / f"{mode}.scenario.yaml"
        path.write_text(yaml.safe_dump(scenario, sort_keys=False))
        out[mode] = path
    return out


def kind_of(cmdline: list[str]) -> str:
    """What a process is: the module of ``python -m MODULE``, else its program's name."""
    if "-m" in cmdline[:-1]:
        return cmdline[cmdline.index("-m") + 1]
    if not cmdline:
        return "?"
    name = Path(cmdline[0].split()[0]).name  # redis-server retitles itself "NAME ADDR"
    if name.startswith("python") and len(cmdline) > 1:
        return Path(cmdline[1]).name
    return name


class CpuSampler:
    """CPU seconds of a process and all its descendants, sampled every ``interval`` s."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self._stop = threading.Event()
        self._kinds: dict[int, str] = {}
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(psutil.Error):
                procs = [self.root, *self.root.children(recursive=True)]
            snap: dict[int, tuple[str, float]] = {}
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    if p.pid not in self._kinds:
                        self._kinds[p.pid] = kind_of(p.cmdline())
                    t = p.cpu_times()
                    snap[p.pid] = (self._kinds[p.pid], t.user + t.system)
            self.samples.append((time.time(), snap))

    def between(self, start: float, end: float) -> tuple[float, dict[str, float]]:
        """(seconds between the snapshots nearest inside [start, end], CPU s by kind)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            raise RuntimeError("too few CPU samples in the steady-state window")
        (t0, a), (t1, b) = inside[0], inside[-1]
        by_kind: dict[str, float] = {}
        for pid, (kind, cpu) in b.items():
            by_kind[kind] = by_kind.get(kind, 0.0) + cpu - a.get(pid, (kind, 0.0))[1]
        return t1 - t0, by_kind


def observed(journal: Journal, check: str) -> str:
    """A steady-state check's measured value as the journal words it (``9.133 req/s``)."""
    for c in journal.checks:
        if c.check == check and c.observed:
            return c.observed
    raise RuntimeError(f"{journal.run_dir}: no measured {check} check ({journal.reason})")


def spans_collected(journal: Journal) -> int:
    for e in journal.events:
        value = e.data.get("spans")
        if e.kind == "traces.collected" and isinstance(value, int):
            return value
    return 0


def requests_recorded(journal: Journal) -> int:
    for e in journal.events:
        value = e.data.get("requests")
        if e.kind == "load.stopped" and isinstance(value, int):
            return value
    return 0


@dataclass(frozen=True, slots=True)
class RunFigures:
    mode: str
    rps: float  # successful requests/s in the steady-state window
    p99_s: float  # e2e p99 over it
    errors: str  # the error_rate check's observed share
    cpu_cores: float  # CPU of everything under `faultday run`, in cores, over the window
    cpu_ms_per_request: float
    collector_cpu_ms_per_request: float
    cpu_ms_per_request_by_process: dict[str, float]
    spans: int  # spans the run kept in traces.db (warm-up included)
    requests: int  # requests the load recorded (warm-up included)
    load_average: float  # the machine's 1-minute load average as the run ended
    run_dir: str


def one_run(scenario: Path, reports: Path, mode: str) -> RunFigures:
    """``faultday run`` of ``scenario`` and its steady-state figures."""
    argv = [str(Path(sys.executable).parent / "faultday"), "run", str(scenario)]
    argv += ["--report-dir", str(reports), "--no-progress"]
    with (
        subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
        CpuSampler(proc.pid) as cpu,
    ):
        try:
            out, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # the harness reverts and stops its stack
            out, _ = proc.communicate(timeout=60)
    journals = list(reports.glob("*/journal.json"))  # a report folder per run
    if len(journals) != 1:
        raise RuntimeError(f"faultday run ({mode}) made no run folder:\n{out[-3000:]}")
    folder = str(journals[0].parent)
    journal = read_journal(Path(folder))
    phases = {e.message: e.wall for e in journal.events if e.kind == "phase"}
    seconds, by_kind = cpu.between(phases["steady-state"], phases["revert"])
    rps = float(observed(journal, "throughput").split()[0])
    per_request = 1e3 / (rps * seconds)
    return RunFigures(
        mode=mode,
        rps=rps,
        p99_s=to_seconds(observed(journal, "latency")),
        errors=observed(journal, "error_rate"),
        cpu_cores=sum(by_kind.values()) / seconds,
        cpu_ms_per_request=sum(by_kind.values()) * per_request,
        collector_cpu_ms_per_request=by_kind.get(COLLECTOR, 0.0) * per_request,
        cpu_ms_per_request_by_process={k: v * per_request for k, v in by_kind.items()},
        requests=requests_recorded(journal),
        load_average=os.getloadavg()[0],
        spans=spans_collected(journal),
        run_dir=folder,
    )


def on_vs_off(args: argparse.Namespace, work: Path) -> tuple[dict[str, object], float, float]:
    """The runs, their medians and (requests/s on/off, e2e p99 on/off)."""
    scenarios = write_inputs(work, seconds=args.seconds, users=args.users)
    order = []
    for i in range(args.rounds):  # ABBA: on, off, off, on, ...
        order += ["on", "off"] if i % 2 == 0 else ["off", "on"]
    runs: list[RunFigures] = []
    for mode in order:
        fig = one_run(scenarios[mode], work / f"reports-{len(runs)}", mode)
        print(json.dumps(asdict(fig)), file=sys.stderr, flush=True)
        runs.append(fig)

    def median(mode: str, field: str) -> float:
        return statistics.median(float(getattr(r, field)) for r in runs if r.mode == mode)

    fields = ("rps", "p99_s", "cpu_cores", "cpu_ms_per_request", "collector_cpu_ms_per_request")
    summary = {m: {f: median(m, f) for f in fields} for m in ("on", "off")}
    kinds = {k for r in runs for k in r.cpu_ms_per_request_by_process}
    by_process = {
        k: {
            m: statistics.median(
                r.cpu_ms_per_request_by_process.get(k, 0.0) for r in runs if r.mode == m
            )
            for m in ("off", "on")
        }
        for k in sorted(kinds)
    }
    rps_ratio = summary["on"]["rps"] / summary["off"]["rps"]
    p99_ratio = summary["on"]["p99_s"] / summary["off"]["p99_s"]
    return (
        {
            "runs": [asdict(r) for r in runs],
            "cpu_ms_per_request_by_process": by_process,
            "median": summary,
            "rps_ratio": rps_ratio,
            "p99_ratio": p99_ratio,
            "cpu_ratio": summary["on"]["cpu_ms_per_request"] / summary["off"]["cpu_ms_per_request"],
            "spans_per_request": statistics.median(
                r.spans / max(r.requests, 1) for r in runs if r.mode == "on"
            ),
        },
        rps_ratio,
        p99_ratio,
    )


# ---- 2. collector ingest -----------------------------------------------------------------
def sender(url: str, start: float, seconds: float, seed: int) -> None:
    """From ``start`` (Unix time) post one pre-encoded body of ``SPANS_PER_BODY`` spans in a
    loop for ``seconds``; print the answers."""
    now = time.time_ns()
    spans = [
        Span(
            trace_id=f"{seed:08x}{i // 16:024x}",
            span_id=f"{seed:04x}{i + 1:012x}",
            parent_id="" if i % 16 == 0 else f"{seed:04x}{i - i % 16 + 1:012x}",
            service="bench",
            name="POST /v1/chat" if i % 16 == 0 else "llm.call",
            start_ns=now + i * 1000,
            end_ns=now + i * 1000 + 250_000,
            kind=SpanKind.SERVER if i % 16 == 0 else SpanKind.CLIENT,
            attributes={
                "http.request.method": "POST",
                "http.response.status_code": 200,
                "server.address": "127.0.0.1",
                "faultday.edge": "agent->llm-primary",
            },
        )
        for i in range(SPANS_PER_BODY)
    ]
    body = encode(spans, "bench")
    answers: dict[int, int] = {}
    headers = {"Content-Type": CONTENT_PROTOBUF}
    with httpx.Client(timeout=10) as client:
        time.sleep(max(0.0, start - time.time()))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            code = client.post(url, content=body, headers=headers).status_code
            answers[code] = answers.get(code, 0) + 1
    print(json.dumps({"answers": answers, "body_bytes": len(body)}), flush=True)


def proc_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def ingest(args: argparse.Namespace, work: Path) -> dict[str, object]:
    argv = [
        sys.executable,
        "-m",
        "faultday.observe.collector",
        "--db",
        str(work / "spans.db"),
        "--port",
        "0",
        "--max-spans",
        "5000000",
        "--log-level",
        "warning",
    ]
    collector = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    senders: list[subprocess.Popen[str]] = []
    try:
        assert collector.stdout is not None
        ready = dict(kv.split("=", 1) for kv in collector.stdout.readline().split()[2:])
        otlp, stats = ready["otlp"], ready["stats"]
        start = time.time() + 3.0  # the senders' start-up (imports, the body) is not timed
        senders = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--sender",
                    otlp,
                    str(start),
                    str(args.ingest_seconds),
                    str(i + 1),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(args.senders)
        ]
        time.sleep(max(0.0, start - time.time()))
        before, cpu0, t0 = httpx.get(stats, timeout=5).json(), proc_cpu(collector.pid), time.time()
        outs = [json.loads(p.communicate(timeout=args.ingest_seconds + 60)[0]) for p in senders]
        took, cpu = time.time() - t0, proc_cpu(collector.pid) - cpu0
        after = httpx.get(stats, timeout=5).json()
    finally:
        for p in [*senders, collector]:
            if p.poll() is None:
                p.terminate()
                p.wait(15)
    accepted = after["spans_accepted"] - before["spans_accepted"]
    answers: dict[str, int] = {}
    for o in outs:
        for code, n in o["answers"].items():
            answers[code] = answers.get(code, 0) + n
    return {
        "senders": args.senders,
        "seconds": took,
        "spans_accepted": accepted,
        "spans_per_s": accepted / took,
        "collector_cpu_cores": cpu / took,
        "collector_cpu_us_per_span": cpu / max(accepted, 1) * 1e6,
        "spans_dropped": after["spans_dropped"] - before["spans_dropped"],
        "answers": answers,
        "body_bytes": outs[0]["body_bytes"],
    }


# ---- main --------------------------------------------------------------------------------
def table(res: dict[str, object], verdicts: dict[str, str]) -> str:
    load = os.getloadavg()
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"{now}; {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; Python {platform.python_version()}"
    ]
    tr = res.get("tracing")
    if isinstance(tr, dict):
        on, off = tr["median"]["on"], tr["median"]["off"]
        lines += [
            "| tracing | requests/s | e2e p99 (s) | CPU ms/request (all) | collector CPU "
            "ms/request | CPU cores |",
            "|---|---|---|---|---|---|",
        ]
        for m, f in (("off", off), ("on", on)):
            lines.append(
                f"| {m} | {f['rps']:.2f} | {f['p99_s']:.3f} | "
                f"{f['cpu_ms_per_request']:.1f} | {f['collector_cpu_ms_per_request']:.2f}"
                f" | {f['cpu_cores']:.2f} |"
            )
        lines.append(
            f"| on / off | {tr['rps_ratio']:.3f} ({verdicts['rps']}, ≥ {TARGET_RPS_RATIO})"
            f" | {tr['p99_ratio']:.3f} ({verdicts['p99']}, ≤ {TARGET_P99_RATIO}) | "
            f"{tr['cpu_ratio']:.3f} | | |"
        )
        lines.append(
            "runs in order (tracing, req/s, p99 s, CPU ms/request, errors, load average): "
            + "; ".join(
                f"{r['mode']} {r['rps']:.2f} {r['p99_s']:.3f} {r['cpu_ms_per_request']:.1f} "
                f"{r['errors']} {r['load_average']:.1f}"
                for r in tr["runs"]
            )
        )
        lines.append(f"spans per request (on): {tr['spans_per_request']:.1f}")
        added = sorted(
            ((v["on"] - v["off"], k) for k, v in tr["cpu_ms_per_request_by_process"].items()),
            reverse=True,
        )
        lines.append(
            "CPU ms/request on − off, by process: "
            + ", ".join(f"{k} {d:+.2f}" for d, k in added if abs(d) >= 0.05)
        )
    ing = res.get("ingest")
    if isinstance(ing, dict):
        lines.append(
            f"collector ingest: {ing['spans_per_s']:.0f} spans/s from {ing['senders']} senders "
            f"({SPANS_PER_BODY}-span bodies of {ing['body_bytes']} B), collector CPU "
            f"{ing['collector_cpu_us_per_span']:.1f} µs/span ({ing['collector_cpu_cores']:.2f} "
            f"cores), answers {ing['answers']}, dropped {ing['spans_dropped']}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sender", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="on/off pairs (ABBA order)")
    parser.add_argument("--seconds", type=float, default=30.0, help="steady state of one run")
    parser.add_argument("--users", type=int, default=16, help="RAG chat users")
    parser.add_argument("--senders", type=int, default=3, help="ingest: sender processes")
    parser.add_argument("--ingest-seconds", type=float, default=8.0)
    parser.add_argument("--only", choices=("tracing", "ingest"), default=None)
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the run folders here (a new folder)"
    )
    args = parser.parse_args()
    if args.sender:
        url, start, seconds, seed = args.sender
        sender(url, float(start), float(seconds), int(seed))
        return 0
    res: dict[str, object] = {}
    verdicts = {"rps": "pass", "p99": "pass"}
    with tempfile.TemporaryDirectory(prefix="faultday-bench-tracing-") as tmp:
        work = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True)  # refuses an existing folder: nothing is overwritten
            work = args.keep
        if args.only != "ingest":
            res["tracing"], rps_ratio, p99_ratio = on_vs_off(args, work)
            verdicts["rps"] = "pass" if rps_ratio >= TARGET_RPS_RATIO else "MISS"
            verdicts["p99"] = "pass" if p99_ratio <= TARGET_P99_RATIO else "MISS"
        if args.only != "tracing":
            res["ingest"] = ingest(args, work)
    print(json.dumps(res, indent=2))
    print()
    print(table(res, verdicts))
    return 0 if "MISS" not in verdicts.values() else 1


if __name__ == "__main__":
    sys.exit(main())
