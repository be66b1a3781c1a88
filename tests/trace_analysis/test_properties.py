"""Random span trees never break the analysis, and a window's shares stay a split of its time."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.trace_analysis.builders import T0_WALL, ns, trace_id

from faultday.core.journal import JournalWindow
from faultday.core.records import RequestRecord
from faultday.core.spans import AttrValue, Span, SpanKind, SpanStatus
from faultday.core.vocab import WindowKind
from faultday.observe.trace_analysis import LLM_PHASES, LLM_SPAN, analyse

pytestmark = pytest.mark.timeout(120)

SERVICES = ("agent", "proxy", "qdrant", "vllm", "")
NAMES = ("POST /v1/chat", "qdrant search", LLM_SPAN, "relay", "GET")
# Attribute values as hostile as OTLP allows: negative, huge, not finite, not a number.
ATTR_VALUES: st.SearchStrategy[AttrValue] = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**12), 10**12),
    st.booleans(),
    st.sampled_from(["latency", "", "[", '["a", 1]', "x,,y", "1e400", 1e300, -1e300, 1e-300]),
)
ATTR_KEYS = (
    *(attr for _, attr in LLM_PHASES),
    "fault.edge",
    "proxy.edge",
    "fault.toxics",
    "fault.latency_ms",
    "retry.attempt",
    "retry.backoff_s",
    "gen_ai.request.model",
    "http.response.status_code",
)


@st.composite
def trace_spans(draw: st.DrawFn, n: int) -> list[Span]:
    """One trace: each span's parent an earlier one, none, a missing id or itself."""
    tid = trace_id(n)
    count = draw(st.integers(1, 25))
    ids = [f"{n:08x}{k:08x}" for k in range(count)]
    spans: list[Span] = []
    for k in range(count):
        parent = draw(
            st.one_of(
                st.sampled_from(["", "ffffffffffffffff", ids[k]]),
                st.sampled_from(ids[: k + 1]),
            )
        )
        start = draw(st.floats(-1.0, 3.0))
        length = draw(st.floats(-0.5, 3.0))
        attrs = draw(st.dictionaries(st.sampled_from(ATTR_KEYS), ATTR_VALUES, max_size=4))
        spans.append(
            Span(
                trace_id=tid,
                span_id=draw(st.sampled_from([ids[k], ids[0]])),  # sometimes sent twice
                parent_id=parent,
                service=draw(st.sampled_from(SERVICES)),
                name=draw(st.sampled_from(NAMES)),
                start_ns=ns(start),
                end_ns=ns(start + length),
                kind=draw(st.sampled_from(list(SpanKind))),
                status=draw(st.sampled_from(list(SpanStatus))),
                attributes=attrs,
            )
        )
    return spans


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[Span], list[RequestRecord], list[JournalWindow]]:
    n_traces = draw(st.integers(0, 6))
    spans = [s for n in range(n_traces) for s in draw(trace_spans(n + 1))]
    requests = [
        RequestRecord(
            t=draw(st.floats(-1.0, 4.0)),
            duration=draw(st.floats(0.0, 5.0)),
            ok=draw(st.booleans()),
            status=draw(st.sampled_from([0, 200, 502])),
            degraded=draw(st.booleans()),
            trace_id=draw(
                st.sampled_from(["", trace_id(99), *(trace_id(n + 1) for n in range(n_traces))])
            ),
        )
        for _ in range(draw(st.integers(0, 8)))
    ]
    windows = [
        JournalWindow(kind=kind, label=f"w{k}", start=start, end=start + length)
        for k, (kind, start, length) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(list(WindowKind)),
                        st.floats(-1.0, 4.0),
                        st.floats(0.0, 5.0),
                    ),
                    max_size=4,
                )
            )
        )
    ]
    return spans, requests, windows


@settings(
    max_examples=150,
    deadline=None,
    database=None,  # no .hypothesis/ examples left in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)
@given(runs())
def test_shares_of_a_window_are_a_split_of_its_time(
    run: tuple[list[Span], list[RequestRecord], list[JournalWindow]],
) -> None:
    spans, requests, windows = run

    out = analyse(spans, windows, requests, t0_wall=T0_WALL, time_scale=1.0)

    assert len(out.windows) == len(windows)
    for w in out.windows:
        shares = [h.share for h in w.hops]
        assert all(0.0 <= s <= 1.0 for s in shares)
        assert sum(shares) <= 1.0 + 1e-4
        assert sum(h.time_s for h in w.hops) <= w.e2e_s + 1e-4 * max(1, len(w.hops))
        assert all(h.errors <= h.count for h in w.hops)
        assert all(math.isfinite(x) for h in w.hops for x in (h.p50_s, h.p99_s, h.time_s))
        if w.mover is not None:
            assert w.mover.share > w.mover.baseline_share
    for e in out.exemplars:
        assert len(e.spans) + e.truncated <= out.spans
    out.model_validate_json(out.model_dump_json())  # what is written reads back
