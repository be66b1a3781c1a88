"""The load's W3C trace context: the header's form, the sampled share, its cost; trace ids on
the sink's lines, old lines without them."""

from __future__ import annotations

import re
import time

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faultday.core.loadconfig import TracePropagation
from faultday.core.scenario import TracesSpec
from faultday.load.runner import LoadOptions, propagation_of
from faultday.load.sink import to_record
from faultday.load.tracecontext import HEADER, TraceStarter

TRACEPARENT = re.compile(r"\A00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])\Z")


def parsed(header: str) -> trace.SpanContext:
    """The header read back by OpenTelemetry's own W3C propagator (not by our pattern)."""
    ctx = TraceContextTextMapPropagator().extract({HEADER: header})
    span_context = trace.get_current_span(ctx).get_span_context()
    assert span_context.is_valid and span_context.is_remote, header
    return span_context


def test_each_request_of_a_trace_has_its_own_parent_id() -> None:
    traces = TraceStarter(TracePropagation())
    t = traces.start()
    assert t is not None and t.sampled
    headers = [t.header() for _ in range(50)]
    assert all(TRACEPARENT.match(h) for h in headers)
    got = [parsed(h) for h in headers]
    assert {f"{c.trace_id:032x}" for c in got} == {t.trace_id}
    assert len({c.span_id for c in got}) == 50
    assert all(c.trace_flags.sampled for c in got)


def test_trace_ids_are_distinct_and_the_share_sampled_follows_the_setting() -> None:
    n, share = 20_000, 0.3
    traces = TraceStarter(TracePropagation(sample=share))
    started = [traces.start() for _ in range(n)]
    ids = [t.trace_id for t in started if t is not None]
    assert len(set(ids)) == n
    sampled = sum(t.sampled for t in started if t is not None)
    # Binomial(20000, 0.3): sd ≈ 65; six of them either side.
    assert abs(sampled - n * share) < 6 * (n * share * (1 - share)) ** 0.5
    flags = {parsed(t.header()).trace_flags.sampled for t in started[:200] if t is not None}
    assert flags == {True, False}  # an unsampled trace carries flag 00, not no header


@pytest.mark.parametrize(("share", "expected"), [(0.0, 0), (1.0, 2000)])
def test_the_ends_of_the_share_are_exact(share: float, expected: int) -> None:
    traces = TraceStarter(TracePropagation(sample=share))
    assert sum(t.sampled for t in (traces.start() for _ in range(2000)) if t) == expected


def test_disabled_means_no_trace() -> None:
    assert TraceStarter(TracePropagation(enabled=False)).start() is None


def test_the_header_is_cheap() -> None:
    """One trace and one header per request, as the locustfile does: microseconds each."""
    traces = TraceStarter(TracePropagation(sample=0.5))
    n = 20_000
    began = time.perf_counter()
    for _ in range(n):
        t = traces.start()
        assert t is not None
        t.header()
    per_request = (time.perf_counter() - began) / n
    assert per_request < 100e-6, f"{per_request * 1e6:.1f} µs a request"


def test_the_scenario_block_reaches_the_load_options() -> None:
    spec = TracesSpec(sample=0.25, enabled=False, forward=("http://c:4318/v1/traces",))
    assert propagation_of(spec) == TracePropagation(enabled=False, sample=0.25)
    assert LoadOptions().traces == TracePropagation(enabled=True, sample=1.0)


def test_a_line_carries_its_trace_to_the_record() -> None:
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    r = to_record({"d": 0.1, "ok": True, "s": 200, "tr": tid, "trs": True}, 0.0)
    assert (r.trace_id, r.trace_sampled) == (tid, True)
    r = to_record({"d": 0.1, "ok": True, "tr": tid, "trs": False}, 0.0)
    assert (r.trace_id, r.trace_sampled) == (tid, False)


def test_an_older_line_without_a_trace_still_reads() -> None:
    r = to_record({"ts": 1.0, "d": 0.1, "ok": False, "s": 503, "n": "chat", "q": "error"}, 2.0)
    assert (r.trace_id, r.trace_sampled, r.status, r.quality) == ("", False, 503, "error")


@pytest.mark.parametrize(
    "bad", ["4BF92F3577B34DA6A3CE929D0E0E4736", "0" * 32, "abc", 12, ["x"], "g" * 32]
)
def test_a_malformed_trace_id_is_a_bad_line(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        to_record({"d": 0.1, "ok": True, "tr": bad}, 0.0)
