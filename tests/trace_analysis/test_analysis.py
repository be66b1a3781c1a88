"""The trace analysis on synthetic traces: critical path, residual, proxy, llm split, windows."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.trace_analysis.builders import (
    ROOT_NAME,
    T0_WALL,
    TraceBuilder,
    request,
    trace_id,
    window,
)

from faultday.core.journal import JournalWindow
from faultday.core.records import RequestRecord
from faultday.core.spans import Span, SpanKind, SpanStatus
from faultday.core.traces import TRACES_NAME, HopStats, TracesSummary, WindowTraces, read_traces
from faultday.core.vocab import WindowKind
from faultday.errors import UsageError
from faultday.observe.trace_analysis import (
    MAX_WATERFALL,
    NO_SPANS_NOTE,
    NOT_JOINED_NOTE,
    analyse,
    write_traces,
)

pytestmark = pytest.mark.timeout(60)

RUN = window(WindowKind.RUN, "run", 0, 100)


def run(
    spans: list[Span], requests: list[RequestRecord], windows: list[JournalWindow] | None = None
) -> TracesSummary:
    return analyse(
        spans,
        [RUN] if windows is None else windows,
        requests,
        t0_wall=T0_WALL,
        time_scale=1.0,
    )


def hops(w: WindowTraces) -> dict[str, HopStats]:
    return {h.hop: h for h in w.hops}


def test_parallel_children_only_the_critical_ones_count() -> None:
    tb = TraceBuilder(trace_id(1), t=1.0)
    root = tb.root(100)
    tb.add("agent", "qdrant search", 10, 40, parent=root, kind=SpanKind.CLIENT)
    tb.add("agent", "redis get", 10, 30, parent=root, kind=SpanKind.CLIENT)  # parallel, ends first
    chat = tb.add("agent", "llm chat", 40, 90, parent=root, kind=SpanKind.CLIENT)
    tb.add("llmsim", "POST /v1/chat/completions", 45, 85, parent=chat, kind=SpanKind.SERVER)

    w = run(tb.spans, [request(tb.trace, 1.0, 0.1)]).windows[0]

    by = hops(w)
    assert by["agent/qdrant search"].time_s == pytest.approx(0.030)
    assert by["agent/redis get"].time_s == 0.0
    assert by["agent/redis get"].count == 1  # seen, never on the path
    assert by["agent/llm chat"].time_s == pytest.approx(0.010)  # 50 less its server's 40
    assert by["llmsim/POST /v1/chat/completions"].time_s == pytest.approx(0.040)
    assert by[f"agent/{ROOT_NAME}"].time_s == pytest.approx(0.020)
    assert by["client/network"].time_s == 0.0
    assert sum(h.share for h in w.hops) == pytest.approx(1.0)
    assert w.top is not None
    assert (w.top.service, w.top.span) == ("llmsim", "POST /v1/chat/completions")


def test_children_are_clipped_to_their_parent() -> None:
    tb = TraceBuilder(trace_id(2), t=1.0)
    root = tb.root(100)
    # Another process's clock runs early and late: the spans stick out of their parent.
    tb.add("qdrant", "search", -20, 30, parent=root, kind=SpanKind.SERVER)
    tb.add("redis", "GET", 60, 130, parent=root, kind=SpanKind.SERVER)

    by = hops(run(tb.spans, [request(tb.trace, 1.0, 0.1)]).windows[0])

    assert by["qdrant/search"].time_s == pytest.approx(0.030)
    assert by["redis/GET"].time_s == pytest.approx(0.040)
    assert by[f"agent/{ROOT_NAME}"].time_s == pytest.approx(0.030)
    assert by["redis/GET"].p50_s == pytest.approx(0.070)  # its figures keep the span's own length


def test_the_client_time_beyond_the_root_is_the_network_hop() -> None:
    slow = TraceBuilder(trace_id(3), t=1.0)
    slow.root(100)
    skewed = TraceBuilder(trace_id(4), t=2.0)
    skewed.root(300)  # longer than the client saw: clipped, never a negative residual

    w = run(
        slow.spans + skewed.spans,
        [request(slow.trace, 1.0, 0.150), request(skewed.trace, 2.0, 0.250)],
    ).windows[0]

    net = hops(w)["client/network"]
    assert net.time_s == pytest.approx(0.050)
    assert net.count == 2
    assert sorted([net.p50_s, net.p99_s]) == pytest.approx([0.0, 0.050])
    assert w.e2e_s == pytest.approx(0.400)
    assert net.share == pytest.approx(0.050 / 0.400)
    assert sum(h.share for h in w.hops) == pytest.approx(1.0)


TOXICS = "latency(latency=50,jitter=0); bandwidth[upstream](rate=100)"


@pytest.mark.parametrize(
    ("service", "edge_attr", "upstream_under_proxy"),
    [
        ("proxy", "fault.edge", False),  # docs/proxy.md: the upstream is the proxy's sibling
        ("proxy", "fault.edge", True),
        ("edge-relay", "proxy.edge", False),
    ],
)
def test_the_proxy_is_transparent_and_its_toxics_listed(
    service: str, edge_attr: str, upstream_under_proxy: bool
) -> None:
    tb = TraceBuilder(trace_id(5), t=1.0)
    root = tb.root(100)
    call = tb.add("agent", "qdrant search", 10, 90, parent=root, kind=SpanKind.CLIENT)
    relay = tb.add(
        service,
        "proxy agent-qdrant",
        12,
        88,
        parent=call,
        attrs={
            edge_attr: "agent-qdrant",
            "fault.toxics": TOXICS,
            "fault.toxic.types": '["latency", "bandwidth"]',
            "fault.toxic.count": 2,
            "fault.toxic.latency_ms": 50,
        },
    )
    upstream = relay if upstream_under_proxy else call
    tb.add("qdrant", "POST /points/search", 20, 35, parent=upstream, kind=SpanKind.SERVER)
    # A parallel call of the agent's that overlaps the relay is never taken for its upstream.
    tb.add("agent", "redis get", 50, 60, parent=call, kind=SpanKind.CLIENT)

    w = run(tb.spans, [request(tb.trace, 1.0, 0.1)]).windows[0]

    by = hops(w)
    assert f"{service}/proxy agent-qdrant" not in by
    assert by["qdrant/POST /points/search"].time_s == pytest.approx(0.015)
    qdrant_call = by["agent/qdrant search"]
    assert qdrant_call.time_s == pytest.approx(0.004 + 0.061)  # its own + the relay's self time
    assert qdrant_call.faults == sorted(TOXICS.split("; "))
    assert qdrant_call.count == 1
    assert by["agent/redis get"].time_s == 0.0
    assert w.top is not None
    assert (w.top.service, w.top.span) == ("agent", "qdrant search")
    assert sum(h.share for h in w.hops) == pytest.approx(1.0)


def test_the_toxic_types_stand_in_when_the_texts_are_absent() -> None:
    tb = TraceBuilder(trace_id(8), t=1.0)
    root = tb.root(100)
    call = tb.add("agent", "llm chat", 0, 100, parent=root, kind=SpanKind.CLIENT)
    tb.add(
        "proxy",
        "proxy agent-llm",
        1,
        99,
        parent=call,
        status=SpanStatus.ERROR,
        attrs={
            "fault.edge": "agent-llm",
            "fault.toxic.types": '["http_error"]',
            "fault.injected_response": True,
            "error.type": "http_error",
        },
    )

    out = run(tb.spans, [request(tb.trace, 1.0, 0.1, ok=False, status=503)])

    assert hops(out.windows[0])["agent/llm chat"].faults == ["http_error"]
    relay = out.exemplars[0].spans[2]
    assert "toxic http_error" in relay.note
    assert "answered by the proxy" in relay.note
    assert "error: http_error" in relay.note


def test_an_llm_request_is_split_into_queue_prefill_and_decode() -> None:
    tb = TraceBuilder(trace_id(6), t=1.0)
    root = tb.root(200)
    tb.add(
        "vllm",
        "llm_request",
        50,
        150,
        parent=root,
        kind=SpanKind.SERVER,
        attrs={
            "gen_ai.latency.time_in_queue": 0.020,
            "gen_ai.latency.time_in_model_prefill": 0.010,
            "gen_ai.latency.time_in_model_decode": 0.050,
        },
    )
    clipped = TraceBuilder(trace_id(7), t=2.0)
    clipped_root = clipped.root(100)
    clipped.add(
        "vllm",
        "llm_request",
        0,
        100,
        parent=clipped_root,
        attrs={"gen_ai.latency.time_in_queue": 0.080, "gen_ai.latency.time_in_model_decode": 5.0},
    )

    first = hops(run(tb.spans, [request(tb.trace, 1.0, 0.2)]).windows[0])
    assert first["vllm/llm_request queue"].time_s == pytest.approx(0.020)
    assert first["vllm/llm_request prefill"].time_s == pytest.approx(0.010)
    assert first["vllm/llm_request decode"].time_s == pytest.approx(0.050)
    assert first["vllm/llm_request"].time_s == pytest.approx(0.020)  # outside the three phases
    assert first["vllm/llm_request decode"].p99_s == pytest.approx(0.050)

    second = hops(run(clipped.spans, [request(clipped.trace, 2.0, 0.1)]).windows[0])
    assert second["vllm/llm_request queue"].time_s == pytest.approx(0.080)
    assert second["vllm/llm_request decode"].time_s == pytest.approx(0.020)  # clipped to the span
    assert "vllm/llm_request prefill" not in second
    assert second["vllm/llm_request"].time_s == 0.0


def test_hostile_phase_and_fault_attributes_are_bounded() -> None:
    tb = TraceBuilder(trace_id(9), t=1.0)
    root = tb.root(100)
    tb.add(
        "vllm",
        "llm_request",
        0,
        100,
        parent=root,
        attrs={
            "gen_ai.latency.time_in_queue": 1e300,  # finite, yet no integer nanoseconds
            "gen_ai.latency.time_in_model_prefill": float("nan"),
            "gen_ai.latency.time_in_model_decode": "soon",
        },
    )
    spans = list(tb.spans)
    requests = [request(tb.trace, 1.0, 0.1)]
    for k in range(30):  # a component naming a fault of its own per request
        other = TraceBuilder(trace_id(1000 + k), t=2.0 + k * 0.01)
        other.add(
            "agent",
            ROOT_NAME,
            0,
            5,
            parent_id="00f067aa0ba902b7",
            attrs={"fault.id": "x" * 200 + str(k)},
        )
        spans += other.spans
        requests.append(request(other.trace, other.t, 0.005))

    by = hops(run(spans, requests).windows[0])

    assert by["vllm/llm_request queue"].time_s == pytest.approx(0.1)
    assert "vllm/llm_request prefill" not in by
    faults = by[f"agent/{ROOT_NAME}"].faults
    assert len(faults) == 21
    assert faults[-1] == "… 10 more"
    assert all(len(f) <= 120 for f in faults)


def _chat(n: int, t: float, *, qdrant_ms: float) -> tuple[list[Span], RequestRecord]:
    tb = TraceBuilder(trace_id(n), t=t)
    end = 10 + qdrant_ms + 50
    root = tb.root(end)
    tb.add("agent", "qdrant search", 10, 10 + qdrant_ms, parent=root, kind=SpanKind.CLIENT)
    tb.add("agent", "llm chat", 10 + qdrant_ms, end, parent=root, kind=SpanKind.CLIENT)
    return tb.spans, request(tb.trace, t, (end + 5) / 1000)


def test_top_and_mover_against_the_baseline() -> None:
    spans: list[Span] = []
    requests: list[RequestRecord] = []
    for k in range(20):
        s, r = _chat(100 + k, 1.0 + k, qdrant_ms=10)
        spans += s
        requests.append(r)
    for k in range(20):
        s, r = _chat(200 + k, 31.0 + k, qdrant_ms=500)
        spans += s
        requests.append(r)
    windows = [
        window(WindowKind.FAULT, "during slow-qdrant", 30, 60, fault="slow-qdrant"),
        window(WindowKind.BASELINE, "baseline", 0, 30),
        RUN,
    ]

    out = run(spans, requests, windows)

    during, baseline, whole = out.windows
    assert baseline.mover is None
    assert baseline.top is not None
    assert baseline.top.span == "llm chat"
    assert during.fault == "slow-qdrant"
    assert during.requests == during.traced == 20
    assert during.top is not None
    assert (during.top.service, during.top.span) == ("agent", "qdrant search")
    assert during.mover is not None  # the baseline comes later in the list: still compared
    assert (during.mover.service, during.mover.span) == ("agent", "qdrant search")
    assert during.mover.baseline_share == pytest.approx(10 / 75, abs=1e-3)
    assert during.mover.share == pytest.approx(500 / 565, abs=1e-3)
    assert during.mover.p99_s == pytest.approx(0.5)
    assert during.mover.baseline_p99_s == pytest.approx(0.010)
    assert whole.requests == 40  # a request counts in every window its start falls in
    for w in out.windows:
        assert all(0 <= h.share <= 1 for h in w.hops)
        assert sum(h.share for h in w.hops) == pytest.approx(1.0)
        assert [h.share for h in w.hops] == sorted((h.share for h in w.hops), reverse=True)


def test_no_mover_when_nothing_rose() -> None:
    spans: list[Span] = []
    requests: list[RequestRecord] = []
    for k in range(4):
        s, r = _chat(300 + k, 1.0 + k * 10, qdrant_ms=10)
        spans += s
        requests.append(r)
    windows = [
        window(WindowKind.BASELINE, "baseline", 0, 20),
        window(WindowKind.RECOVERED, "recovered", 20, 40),
    ]

    out = run(spans, requests, windows)

    assert [w.mover for w in out.windows] == [None, None]
    assert out.windows[1].top is not None


def test_exemplars_with_notes_and_a_truncated_waterfall() -> None:
    ok = TraceBuilder(trace_id(10), t=1.0)
    root = ok.root(900)
    call = ok.add(
        "agent",
        "llm chat",
        5,
        890,
        parent=root,
        kind=SpanKind.CLIENT,
        attrs={"gen_ai.request.model": "tiny-chat", "faultday.attempts": 2},
    )
    ok.add(
        "agent",
        "attempt",
        5,
        400,
        parent=call,
        status=SpanStatus.ERROR,
        message="503 from llm",
        attrs={"retry.attempt": 1, "http.response.status_code": 503},
    )
    ok.add(
        "agent",
        "attempt",
        500,
        890,
        parent=call,
        attrs={"retry.attempt": 2, "retry.backoff_s": 0.1},
    )
    # The leaves of a wide fan-out, more than a waterfall shows.
    for k in range(MAX_WATERFALL + 50):
        ok.add("tools", f"step {k}", 10 + k, 11 + k, parent=root)
    quick = TraceBuilder(trace_id(11), t=2.0)
    quick.root(50)
    failed = TraceBuilder(trace_id(12), t=3.0)
    failed_root = failed.root(60, status=SpanStatus.ERROR)
    failed.add(
        "faultday-proxy",
        "relay",
        5,
        55,
        parent=failed_root,
        attrs={"fault.edge": "agent-llm", "fault.toxics": "reset_peer(toxicity=1)"},
        status=SpanStatus.ERROR,
        message="connection reset",
    )
    degraded = TraceBuilder(trace_id(13), t=4.0)
    degraded_root = degraded.root(70)
    degraded.add(
        "agent",
        "tools call",
        5,
        60,
        parent=degraded_root,
        attrs={
            "gen_ai.tool.name": "search",
            "breaker.state": "open",
            "faultday.degraded_reasons": '["tool_failed"]',
        },
    )
    windows = [
        window(WindowKind.BASELINE, "baseline", 0, 2.5),
        window(WindowKind.FAULT, "during reset", 2.5, 10),
        RUN,
    ]

    out = run(
        ok.spans + quick.spans + failed.spans + degraded.spans,
        [
            request(ok.trace, 1.0, 0.9),
            request(quick.trace, 2.0, 0.05),
            request(failed.trace, 3.0, 0.06, ok=False, status=502),
            request(degraded.trace, 4.0, 0.07, degraded=True),
        ],
        windows,
    )

    by_kind = {e.kind: e for e in out.exemplars}
    assert [e.kind for e in out.exemplars] == ["slowest_ok", "failed", "degraded"]
    slow = by_kind["slowest_ok"]
    assert slow.trace_id == ok.trace
    assert slow.window == "baseline"
    assert slow.duration_s == pytest.approx(0.9)
    assert len(slow.spans) == MAX_WATERFALL
    assert slow.truncated == len(ok.spans) - MAX_WATERFALL
    assert slow.spans[0].depth == 0
    assert slow.spans[0].start_s == 0.0
    # Depth first: the call, then its attempts, before the root's later children.
    assert [(s.name, s.depth) for s in slow.spans[:4]] == [
        (ROOT_NAME, 0),
        ("llm chat", 1),
        ("attempt", 2),
        ("attempt", 2),
    ]
    notes = [s.note for s in slow.spans[1:4]]
    assert "model tiny-chat" in notes[0]
    assert "2 attempts" in notes[0]
    assert "attempt 1" in notes[1]
    assert "HTTP 503" in notes[1]
    assert "error: 503 from llm" in notes[1]
    assert "attempt 2" in notes[2]
    assert "backoff 0.1 s" in notes[2]
    fail = by_kind["failed"]
    assert (fail.trace_id, fail.status, fail.window) == (failed.trace, 502, "during reset")
    assert "toxic reset_peer(toxicity=1)" in fail.spans[1].note
    assert "edge agent-llm" in fail.spans[1].note
    assert "error: connection reset" in fail.spans[1].note
    assert by_kind["degraded"].trace_id == degraded.trace
    assert by_kind["degraded"].spans[1].note == "tool search; breaker open; degraded: tool_failed"


def test_a_request_without_spans_counts_but_is_not_traced() -> None:
    tb = TraceBuilder(trace_id(20), t=1.0)
    tb.root(100)
    requests = [
        request(tb.trace, 1.0, 0.1),
        request(trace_id(21), 2.0, 0.5),  # its spans never arrived
        request("", 3.0, 0.5),  # sent without a traceparent
    ]

    out = run(tb.spans, requests)

    assert (out.requests, out.requests_traced, out.spans, out.traces) == (3, 1, 1, 1)
    w = out.windows[0]
    assert (w.requests, w.traced) == (3, 1)
    assert w.e2e_s == pytest.approx(0.1)
    assert out.note == ""
    assert out.services == ["agent"]


def test_nothing_to_analyse_says_how_to_turn_tracing_on() -> None:
    out = run([], [request("", 1.0, 0.1)])

    assert out.note == NO_SPANS_NOTE
    assert "spec.collector" in out.note
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in out.note
    assert (out.spans, out.traces, out.requests, out.requests_traced) == (0, 0, 1, 0)
    assert out.exemplars == []
    w = out.windows[0]
    assert (w.requests, w.traced, w.hops, w.top, w.mover) == (1, 0, [], None, None)
    assert run([], [], []).windows == []


def test_without_trace_ids_each_root_stands_for_its_request() -> None:
    tb = TraceBuilder(trace_id(30), t=5.0)
    root = tb.root(100)
    tb.add("agent", "qdrant search", 0, 80, parent=root)

    out = analyse(tb.spans, [RUN], [request("", 5.0, 0.2)], t0_wall=T0_WALL - 10.0, time_scale=2.0)

    assert out.note == NOT_JOINED_NOTE
    w = out.windows[0]
    assert (w.requests, w.traced) == (1, 1)
    assert "client/network" not in hops(w)
    assert hops(w)["agent/qdrant search"].share == pytest.approx(0.8)
    assert out.exemplars[0].t == pytest.approx((5.0 + 10.0) / 2.0)  # run seconds, scaled


def test_bad_time_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        analyse([], [], [], t0_wall=T0_WALL, time_scale=0)


def test_traces_json_round_trip_and_a_bad_file(tmp_path: Path) -> None:
    tb = TraceBuilder(trace_id(40), t=1.0)
    tb.root(100)
    out = run(tb.spans, [request(tb.trace, 1.0, 0.1)])

    assert read_traces(tmp_path) is None
    path = write_traces(tmp_path, out)
    assert path == tmp_path / TRACES_NAME
    assert read_traces(tmp_path) == out

    path.write_text('{"spans": "many"}')
    with pytest.raises(UsageError, match=r"traces\.json: field spans"):
        read_traces(tmp_path)
    path.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        read_traces(tmp_path)


def test_an_agent_task_shares_its_trace_with_its_submit() -> None:
    tb = TraceBuilder(trace_id(50), t=1.0)
    submit = tb.root(20)
    tb.add("agent", "task research", 15, 700, parent=submit)  # runs on after the answer
    for k in range(3):  # each poll is a request of its own: a root of its own
        tb.add(
            "agent",
            "GET /v1/tasks/{id}",
            200 * (k + 1),
            200 * (k + 1) + 5,
            parent_id=f"{k + 1:016x}",
            kind=SpanKind.SERVER,
        )
    requests = [
        request(tb.trace, 1.0, 0.025),  # task.submit
        request(tb.trace, 1.0, 0.7, ok=False),  # the task, submit to last poll
    ]

    out = run(tb.spans, requests)

    assert (out.requests, out.requests_traced) == (2, 2)
    w = out.windows[0]
    assert (w.requests, w.traced) == (2, 1)  # the submit owns the root; the task's time is polls
    assert w.e2e_s == pytest.approx(0.025)
    by = hops(w)
    assert by["agent/task research"].time_s == pytest.approx(0.005)  # clipped to the submit
    assert by["client/network"].time_s == pytest.approx(0.005)
    failed = next(e for e in out.exemplars if e.kind == "failed")
    assert failed.duration_s == pytest.approx(0.7)
    assert [s.name for s in failed.spans] == [
        ROOT_NAME,
        "task research",
        *["GET /v1/tasks/{id}"] * 3,
    ]


def test_retries_are_counted_per_hop_from_the_attempt_number() -> None:
    tb = TraceBuilder(trace_id(77), t=1.0)
    root = tb.root(100)
    call = tb.add("agent", "llm-primary chat", 5, 95, parent=root)
    for attempt, (lo, hi) in enumerate([(5, 30), (35, 60), (65, 95)], start=1):
        tb.add("agent", "llm-primary chat attempt", lo, hi, parent=call, kind=SpanKind.CLIENT,
               attrs={"retry.attempt": attempt})  # fmt: skip
    by = hops(run(tb.spans, [request(tb.trace, 1.0, 0.1)]).windows[0])
    assert by["agent/llm-primary chat attempt"].count == 3
    assert by["agent/llm-primary chat attempt"].retries == 2  # attempts 2 and 3
    assert by["agent/llm-primary chat"].retries == 0
