"""Every check on recorded series: where it must pass, where it must fail, too few samples."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from faultday.checks.base import check_registry
from faultday.core.clock import Clock
from faultday.core.protocols import StackDriver
from faultday.core.records import Observations, RequestRecord, Sample
from faultday.core.targets import Target
from faultday.core.windows import CheckResult, Verdict, Window, WindowKind

FAULT = Window(WindowKind.FAULT, "during xid79", 10.0, 20.0, fault="xid79")
AFTER = Window(WindowKind.AFTER, "after xid79", 20.0, 40.0, fault="xid79")
BASE = Window(WindowKind.BASELINE, "baseline", 0.0, 10.0)


@dataclass
class _Plan:
    def window(self, kind: WindowKind, fault: str = "") -> Window:
        assert kind == WindowKind.BASELINE
        return BASE


@dataclass
class Recorded:
    """A CheckContext over recorded observations (what the engine's Run offers after a run)."""

    observations: Observations = field(default_factory=Observations)
    faults: dict[str, tuple[float, float]] = field(default_factory=lambda: {"xid79": (10.0, 20.0)})
    run_dir: Path | None = None
    clock: Clock = field(default_factory=Clock)
    plan: _Plan = field(default_factory=_Plan)
    time_scale: float = 1.0
    stack: StackDriver | None = None  # recorded: no live stack

    def fault_times(self, fault: str) -> tuple[float, float]:
        return self.faults[fault]

    def target(self, name: str) -> Target:
        raise AssertionError(f"recorded checks must not probe {name}")


def judge(ctx: Recorded, check: str, window: Window = FAULT, **params: object) -> CheckResult:
    cls = check_registry().get(check)
    inst = cls()
    return inst.evaluate(ctx, inst.parse(params), window)  # type: ignore[arg-type]


def reqs(start: float, end: float, n: int, **kw: object) -> list[RequestRecord]:
    step = (end - start) / n
    return [
        RequestRecord(**{"t": start + i * step, "duration": 0.1, "ok": True, **kw})
        for i in range(n)
    ]  # type: ignore[arg-type]


def ctx_with(*groups: list[RequestRecord], samples: list[Sample] = ()) -> Recorded:  # type: ignore[assignment]
    ctx = Recorded()
    for g in groups:
        ctx.observations.add_requests(g)
    ctx.observations.add_samples(samples)
    return ctx


# ---- error_rate -----------------------------------------------------------------------
def test_error_rate_pass_fail_and_too_few() -> None:
    good = ctx_with(reqs(10, 20, 100), reqs(10.05, 20, 1, ok=False, status=500))
    assert judge(good, "error_rate", max=0.02).verdict == Verdict.PASSED
    bad = ctx_with(reqs(10, 20, 90), reqs(10.01, 20, 10, ok=False, status=503, error="HTTP 503"))
    r = judge(bad, "error_rate", max=0.02)
    assert r.verdict == Verdict.FAILED
    assert (
        r.describe()
        == "during xid79: error_rate expected ≤ 2%, observed 10% (n=100) — most: HTTP 503 x10"
    )
    few = judge(ctx_with(reqs(10, 20, 3)), "error_rate", max=0.02)
    assert few.verdict == Verdict.INSUFFICIENT
    assert "too few requests" in few.message and "3" in few.message


def test_records_outside_the_window_do_not_count() -> None:
    ctx = ctx_with(reqs(0, 10, 100, ok=False), reqs(10, 20, 50))
    assert judge(ctx, "error_rate", max=0.0).verdict == Verdict.PASSED


# ---- latency --------------------------------------------------------------------------
def _ttft(n: int, slow: int) -> list[RequestRecord]:
    rs = []
    for i in range(n):
        ttft = 4.2 if i < slow else 0.2
        rs.append(
            RequestRecord(
                t=10 + i * 9.9 / n,
                duration=ttft + 1,
                ok=True,
                ttft=ttft,
                itl=(0.02, 0.03, 0.5 if i == 0 else 0.02),
            )
        )
    return rs


def test_latency_ttft_p99_reads_like_the_issue() -> None:
    ctx = ctx_with(_ttft(812, 20))
    r = judge(ctx, "latency", metric="ttft", percentile=99, max="1.5s")
    assert r.verdict == Verdict.FAILED
    assert r.describe() == "during xid79: latency ttft p99 expected ≤ 1.5s, observed 4.2s (n=812)"
    assert judge(ctx, "latency", metric="ttft", percentile=50, max="1.5s").verdict == Verdict.PASSED


def test_latency_percentile_is_exact_not_bucketed() -> None:
    # 100 requests at 1..100 ms: nearest-rank p99 is exactly 99 ms, p50 exactly 50 ms.
    rs = [RequestRecord(t=10 + i * 0.05, duration=(i + 1) / 1000, ok=True) for i in range(100)]
    ctx = ctx_with(rs)
    assert judge(ctx, "latency", percentile=99, max="99ms").verdict == Verdict.PASSED
    assert judge(ctx, "latency", percentile=99, max="98ms").verdict == Verdict.FAILED
    assert judge(ctx, "latency", percentile=50, max="50ms").observed == "50ms"


def test_latency_itl_and_too_few_streams() -> None:
    ctx = ctx_with(_ttft(50, 0))
    assert judge(ctx, "latency", metric="itl", percentile=50, max="25ms").verdict == Verdict.PASSED
    assert (
        judge(ctx, "latency", metric="itl", percentile=100, max="100ms").verdict == Verdict.FAILED
    )
    plain = ctx_with(reqs(10, 20, 50))  # no streams: no TTFT at all
    r = judge(plain, "latency", metric="ttft", max="1s")
    assert r.verdict == Verdict.INSUFFICIENT and "streamed requests" in r.message


def test_baseline_leaves_out_requests_still_in_flight_when_the_first_fault_starts() -> None:
    # 20 quick requests in baseline [0, 10), and two sent at 9.6 and 9.8 that took 4 s real:
    # at --time-scale 0.1 they end at 49.6 and 49.8, served under the fault, not before it.
    quick = reqs(0, 8, 20)  # 0.1 s real each: the last ends at 8.6
    straddling = [RequestRecord(t=t, duration=4.0, ok=True) for t in (9.6, 9.8)]
    ctx = ctx_with(quick, straddling)
    ctx.time_scale = 0.1
    r = judge(ctx, "latency", BASE, percentile=99, max="3s")
    assert (r.verdict, r.n, r.observed) == (Verdict.PASSED, 20, "100ms")
    # At scale 1 they end at 13.6 and 13.8: still after the baseline.
    assert judge(ctx_with(quick, straddling), "latency", BASE, max="3s").n == 20
    answered = [RequestRecord(t=t, duration=0.3, ok=True) for t in (9.6, 9.65)]
    r = judge(ctx_with(quick, answered), "latency", BASE, percentile=100, max="250ms")
    assert (r.verdict, r.n) == (Verdict.FAILED, 22)  # answered by 9.95: they count
    # A fault window keeps what was sent in it, however long it took.
    late = [RequestRecord(t=19.0, duration=4.0, ok=True)]
    r = judge(ctx_with(reqs(10, 18, 20), late), "latency", FAULT, percentile=100, max="3s")
    assert (r.verdict, r.n) == (Verdict.FAILED, 21)


def test_latency_needs_units() -> None:
    with pytest.raises(ValueError, match="unit"):
        check_registry().get("latency")().parse({"metric": "e2e", "max": 1.5})
    with pytest.raises(ValueError, match="Extra inputs"):
        check_registry().get("latency")().parse({"metric": "e2e", "max": "1s", "pct": 99})


def test_queue_latency_from_scraped_histogram() -> None:
    name = "vllm:request_queue_time_seconds_bucket"

    def snap(t: float, counts: dict[str, float]) -> list[Sample]:
        return [
            Sample(t, name, v, (("component", "llm-primary"), ("le", le)))
            for le, v in counts.items()
        ]

    samples = snap(9.5, {"0.1": 0, "1.0": 0, "+Inf": 0}) + snap(
        19.5, {"0.1": 10, "1.0": 95, "+Inf": 100}
    )
    ctx = ctx_with(samples=samples)
    r = judge(ctx, "latency", metric="queue", percentile=90, max="1s", target="llm-primary")
    assert r.verdict == Verdict.PASSED and r.n == 100
    r = judge(ctx, "latency", metric="queue", percentile=99, max="1s", target="llm-primary")
    assert r.verdict == Verdict.FAILED
    assert judge(ctx_with(), "latency", metric="queue", max="1s").verdict == Verdict.INSUFFICIENT


# ---- throughput, goodput ----------------------------------------------------------------
def test_throughput_and_goodput() -> None:
    rs = [
        RequestRecord(
            t=10 + i * 0.01,
            duration=0.5 if i % 2 else 3.0,
            ok=True,
            tokens=10,
            ttft=0.1 if i % 2 else 2.0,
        )
        for i in range(1000)
    ]
    ctx = ctx_with(rs)
    assert judge(ctx, "throughput", min=90).verdict == Verdict.PASSED  # 100 req/s
    r = judge(ctx, "throughput", min=150)
    assert r.verdict == Verdict.FAILED and r.observed == "100 req/s"
    assert judge(ctx, "throughput", unit="tokens", min=900).verdict == Verdict.PASSED
    g = judge(ctx, "goodput", slo_ttft="1s", min=600)  # half met the SLO: 500 tok/s
    assert g.verdict == Verdict.FAILED and g.observed == "500 tok/s"
    assert judge(ctx, "goodput", slo_ttft="1s", min=400).verdict == Verdict.PASSED
    assert judge(ctx_with(), "throughput", min=1).verdict == Verdict.INSUFFICIENT
    short = Window(WindowKind.ABORT, "last 0.5s", 10, 10.5)
    assert judge(ctx, "goodput", short, slo_e2e="1s", min=1).verdict == Verdict.INSUFFICIENT


# ---- fallback_rate, degraded_reason ------------------------------------------------------
def test_fallback_rate_and_degraded_reason() -> None:
    served = reqs(10, 20, 96, degraded=True, reasons=("llm_backup",), model="sim-backup")
    canned = reqs(10.01, 20, 4, degraded=True, reasons=("llm_unavailable",), model="canned")
    ctx = ctx_with(served, canned)
    assert judge(ctx, "fallback_rate", min=0.95).verdict == Verdict.PASSED
    assert judge(ctx, "fallback_rate", min=0.97, reasons=["llm_backup"]).verdict == Verdict.FAILED
    assert (
        judge(ctx, "fallback_rate", min=0.95, models=["sim-backup"], reasons=["none"]).verdict
        == Verdict.PASSED
    )
    assert (
        judge(ctx, "degraded_reason", reason="llm_unavailable", max=0.05).verdict == Verdict.PASSED
    )
    r = judge(ctx, "degraded_reason", reason="llm_*", max=0.5)
    assert r.verdict == Verdict.FAILED and r.observed == "100%"
    assert (
        judge(ctx_with(reqs(10, 20, 2)), "fallback_rate", min=0.5).verdict == Verdict.INSUFFICIENT
    )


# ---- recovery_time ------------------------------------------------------------------------
def test_recovery_time_from_the_revert() -> None:
    # Errors until t=24, clean after: recovery is 4 s after the revert at t=20.
    ctx = ctx_with(reqs(20, 24, 40, ok=False), reqs(24, 40, 160))
    r = judge(ctx, "recovery_time", AFTER, max="5s", hold="5s")
    assert r.verdict == Verdict.PASSED and r.observed == "4s"
    assert judge(ctx, "recovery_time", AFTER, max="3s", hold="5s").verdict == Verdict.FAILED
    never = ctx_with(reqs(20, 40, 200, ok=False))
    n = judge(never, "recovery_time", AFTER, max="10s")
    assert n.verdict == Verdict.FAILED and n.observed == "not recovered"
    short = Window(WindowKind.AFTER, "after xid79", 20.0, 22.0, fault="xid79")
    assert judge(ctx, "recovery_time", short, max="5s", hold="5s").verdict == Verdict.INSUFFICIENT


def test_recovery_time_with_a_latency_bound() -> None:
    slow = [RequestRecord(t=20 + i * 0.1, duration=2.0, ok=True) for i in range(60)]
    ctx = ctx_with(slow, reqs(26, 40, 140))
    r = judge(ctx, "recovery_time", AFTER, max="10s", hold="3s", max_latency="1s")
    assert r.verdict == Verdict.PASSED and r.observed == "6s"


# ---- metric, retry_amplification, breaker ---------------------------------------------------
def _counter(
    name: str, labels: tuple[tuple[str, str], ...], points: list[tuple[float, float]]
) -> list[Sample]:
    return [Sample(t, name, v, labels) for t, v in points]


def test_metric_value_rate_and_restart() -> None:
    lab = (("component", "agent"),)
    # A counter that restarts at t=15 (value drops): growth is still counted.
    s = _counter("x_total", lab, [(9, 100), (11, 110), (13, 130), (15, 5), (17, 25), (19, 45)])
    ctx = ctx_with(samples=s)
    inc = judge(ctx, "metric", metric="x_total", agg="increase", max=100)
    assert inc.verdict == Verdict.PASSED and inc.observed == "75"
    assert judge(ctx, "metric", metric="x_total", agg="rate", min=10).verdict == Verdict.FAILED
    assert (
        judge(ctx, "metric", metric="x_total", agg="max", min=130, target="agent").verdict
        == Verdict.PASSED
    )
    assert judge(ctx, "metric", metric="nope_total", max=1).verdict == Verdict.INSUFFICIENT


def test_retry_amplification_against_baseline() -> None:
    lab = (("component", "proxy"), ("proxy", "agent_to_llm-primary"))
    name = "faultday_proxy_http_requests_total"
    # Baseline: 100 client requests, 100 downstream. Fault: 100 client, 400 downstream.
    s = _counter(name, lab, [(0, 0), (9.9, 100), (19.9, 500)])
    ctx = ctx_with(reqs(0, 10, 100), reqs(10, 20, 100), samples=s)
    r = judge(ctx, "retry_amplification", target="llm-primary", max=1.5)
    assert r.verdict == Verdict.FAILED and r.observed == "4x"
    assert judge(ctx, "retry_amplification", target="llm-primary", max=5).verdict == Verdict.PASSED
    few = ctx_with(reqs(0, 10, 100), reqs(10, 20, 3), samples=s)
    assert (
        judge(few, "retry_amplification", target="llm-primary", max=5).verdict
        == Verdict.INSUFFICIENT
    )


def test_breaker_opens_probes_and_closes() -> None:
    lab = (("component", "agent"), ("dependency", "llm-primary"))
    name = "faultday_agent_breaker_state"
    good = _counter(name, lab, [(9, 0), (11, 2), (14, 1), (15, 2), (21, 1), (23, 0)])
    ctx = ctx_with(samples=good)
    r = judge(ctx, "breaker", dependency="llm-primary", opened_within="2s", closed_within="5s")
    assert r.verdict == Verdict.PASSED, r.describe()
    never = ctx_with(samples=_counter(name, lab, [(9, 0), (12, 0), (18, 0), (22, 0)]))
    n = judge(never, "breaker", dependency="llm-primary", opened_within="2s")
    assert n.verdict == Verdict.FAILED and n.observed == "never opened"
    assert judge(ctx_with(), "breaker", dependency="llm-primary").verdict == Verdict.INSUFFICIENT


def test_a_half_open_probe_between_scrapes_is_seen_in_the_transition_counter() -> None:
    lab = (("component", "agent"), ("dependency", "llm-primary"))
    # The gauge never shows 1: every probe ran between two scrapes.
    gauge = _counter("faultday_agent_breaker_state", lab, [(9, 0), (11, 2), (15, 2), (23, 0)])
    probed = _counter(
        "faultday_agent_breaker_transitions_total",
        (*lab, ("state", "half-opened")),
        [(9, 0), (11, 0), (15, 1), (23, 2)],
    )
    args = {"dependency": "llm-primary", "opened_within": "2s", "closed_within": "5s"}
    assert judge(ctx_with(samples=gauge + probed), "breaker", **args).verdict == Verdict.PASSED
    missed = judge(ctx_with(samples=gauge), "breaker", **args)
    assert missed.verdict == Verdict.FAILED and "no half-open probe seen" in missed.message


# ---- tasks_lost, audit, duplicate_side_effects ------------------------------------------------
def test_tasks_lost() -> None:
    run = Window(WindowKind.RUN, "whole run", 0.0, 40.0)
    subs = [
        RequestRecord(t=1.0 + i, duration=0.05, ok=True, name="task.submit", task_id=f"t{i}")
        for i in range(5)
    ]
    done = [
        RequestRecord(
            t=1.0 + i, duration=3.0, ok=True, name="task", task_id=f"t{i}", task_state="done"
        )
        for i in range(4)
    ]
    lost = [
        RequestRecord(t=5.0, duration=3.0, ok=False, name="task", task_id="t4", task_state="lost")
    ]
    assert judge(ctx_with(subs, done, reqs(0, 40, 10)), "tasks_lost", run).verdict == Verdict.PASSED
    r = judge(ctx_with(subs, done, lost), "tasks_lost", run)
    assert r.verdict == Verdict.FAILED and r.observed == "1" and "t4" in r.message
    assert judge(ctx_with(reqs(0, 40, 10)), "tasks_lost", run).verdict == Verdict.INSUFFICIENT


def _audit(tmp_path: Path, entries: list[dict[str, object]]) -> Recorded:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "audit.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    ctx = Recorded(run_dir=tmp_path)
    ctx.clock.t0_wall = 1000.0
    return ctx


def test_audit_and_duplicates(tmp_path: Path) -> None:
    run = Window(WindowKind.RUN, "whole run", 0.0, 40.0)
    e = [
        {
            "ts": 1005.0,
            "task": "a",
            "tool": "send_message",
            "args": {"to": "x", "idempotency_key": "k1"},
            "decision": "allowed",
            "result": "{}",
        },
        {
            "ts": 1006.0,
            "task": "a",
            "tool": "send_message",
            "args": {"to": "x", "idempotency_key": "k1"},
            "decision": "allowed",
            "result": "{}",
        },
        {
            "ts": 1007.0,
            "task": "b",
            "tool": "update_record",
            "args": {"id": "r"},
            "decision": "denied",
            "result": "not allowed",
        },
    ]
    ctx = _audit(tmp_path, e)
    assert judge(ctx, "audit", run).verdict == Verdict.PASSED
    # Same key twice: the tool server applied it once. Not a duplicate.
    assert judge(ctx, "duplicate_side_effects", run).verdict == Verdict.PASSED
    ctx.observations.add_samples(
        _counter("faultday_agent_tool_calls_total", (("component", "agent"),), [(0, 0), (30, 7)])
    )
    a = judge(ctx, "audit", run)
    assert a.verdict == Verdict.FAILED and "counted 7 tool calls" in a.message


def test_duplicates_under_fresh_keys(tmp_path: Path) -> None:
    run = Window(WindowKind.RUN, "whole run", 0.0, 40.0)
    e = [
        {
            "ts": 1005.0 + i,
            "task": "a",
            "tool": "send_message",
            "args": {"to": "x", "idempotency_key": f"k{i}"},
            "decision": "allowed",
            "result": "{}",
        }
        for i in range(3)
    ]
    r = judge(_audit(tmp_path, e), "duplicate_side_effects", run)
    assert r.verdict == Verdict.FAILED and r.observed == "2"


def test_audit_without_a_log_is_insufficient(tmp_path: Path) -> None:
    ctx = Recorded(run_dir=tmp_path)
    r = judge(ctx, "audit", Window(WindowKind.RUN, "whole run", 0, 10))
    assert r.verdict == Verdict.INSUFFICIENT and "no audit log" in r.message
    assert math.isfinite(0)


def test_retry_amplification_counts_dials_at_a_dead_upstream() -> None:
    lab = (("component", "proxy"), ("proxy", "agent_to_llm-primary"))
    # Baseline: 100 client requests, 100 downstream. Fault: the replica is gone, so
    # nothing reaches it as HTTP, but 500 dials fail at the proxy: a retry storm.
    s = _counter("faultday_proxy_http_requests_total", lab, [(0, 0), (9.9, 100), (19.9, 100)])
    s += _counter("faultday_proxy_upstream_failures_total", lab, [(0, 0), (9.9, 0), (19.9, 500)])
    ctx = ctx_with(reqs(0, 10, 100), reqs(10, 20, 100), samples=s)
    r = judge(ctx, "retry_amplification", target="llm-primary", max=1.5)
    assert r.verdict == Verdict.FAILED and r.observed == "5x"
    only_http = judge(ctx, "retry_amplification", target="llm-primary", max=1.5, failed_dials=None)
    assert only_http.verdict == Verdict.PASSED and only_http.observed == "0x"
