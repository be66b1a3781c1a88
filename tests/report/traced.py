"""traces.json for the report tests' run layout (baseline 0-20 s, xid79 20-40 s, recovered 50-60 s).

Built with the model the analysis writes (``faultday.core.traces``) and written with its own
writer, so a field the model renames breaks these tests, not a reader in production.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faultday.core.spans import SpanStatus
from faultday.core.traces import (
    Exemplar,
    HopStats,
    Mover,
    TopHop,
    TracesSummary,
    WaterfallSpan,
    WindowTraces,
    write_traces,
)
from faultday.core.vocab import WindowKind

TRACE_FAILED = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_SLOW = "00f067aa0ba902b7a3ce929d0e0e4736"
SEARCH = "qdrant.search"
CHAT = "llm.chat"

# hop (service, span) → baseline share, p99; the baseline of an agent answering from RAG.
BASE_HOPS: dict[tuple[str, str], tuple[float, float]] = {
    ("llm-primary", "llm_request/decode"): (0.34, 0.41),
    ("llm-primary", "llm_request/prefill"): (0.12, 0.09),
    ("agent", CHAT): (0.10, 0.6),
    ("tools", "tool.call"): (0.12, 0.2),
    ("client", "network"): (0.10, 0.03),
    ("agent", SEARCH): (0.08, 0.012),
    ("embedder", "embed"): (0.06, 0.01),
    ("redis", "GET"): (0.05, 0.002),
    ("agent", "policy"): (0.03, 0.001),
}


@dataclass(frozen=True)
class Shape:
    """How the fault window's traces differ from the baseline."""

    search_share: float = 0.71  # agent/qdrant.search's share during xid79
    chat_calls: float = 1.0  # agent/llm.chat spans per traced request during xid79
    base_chat_calls: float = 1.0
    failed: bool = True  # a failed exemplar in the fault window
    dropped: int = 0
    rejected: int = 0
    name: str = SEARCH  # the span name of the mover (a test makes it hostile)


def _hops(
    shares: dict[tuple[str, str], float], *, traced: int, calls: float, shape: Shape
) -> list[HopStats]:
    total = sum(shares.values())
    hops = []
    for (service, span), raw in shares.items():
        share = raw / total
        base_p99 = BASE_HOPS.get((service, span), (0.0, 0.05))[1]
        slow = span == shape.name and shape.search_share > 0.2
        count = round(traced * (calls if span == CHAT else 1.0))
        hops.append(
            HopStats(
                hop=f"{service}/{span}",
                service=service,
                span=span,
                count=count,
                errors=3 if slow else 0,
                error_share=3 / count if slow and count else 0.0,
                p50_s=base_p99 / 3 if not slow else 1.1,
                p99_s=2.3 if slow else base_p99,
                time_s=share * 400.0,
                share=share,
                faults=["latency"] if slow else [],
                # Every call past the first per request was a retry (retry.attempt ≥ 2).
                retries=count - traced if span == CHAT else 0,
            )
        )
    return sorted(hops, key=lambda h: -h.share)


def _window(
    label: str,
    kind: WindowKind,
    t: tuple[float, float],
    hops: list[HopStats],
    *,
    fault: str | None = None,
    mover: Mover | None = None,
) -> WindowTraces:
    top = TopHop(service=hops[0].service, span=hops[0].span, share=hops[0].share)
    return WindowTraces(
        label=label,
        kind=kind,
        fault=fault,
        t0=t[0],
        t1=t[1],
        requests=200,
        traced=190,
        e2e_s=400.0,
        hops=hops,
        top=top,
        mover=mover,
    )


def _span(ids: str, hop: tuple[str, str], at: float, took: float, **kw: object) -> WaterfallSpan:
    """``ids`` is "span<parent" ("a2<a1"; "a1<" for a root)."""
    span_id, _, parent = ids.partition("<")
    return WaterfallSpan.model_validate(
        {
            "span_id": span_id,
            "parent_id": parent,
            "service": hop[0],
            "name": hop[1],
            "start_s": at,
            "duration_s": took,
            "status": str(kw.get("status", SpanStatus.OK)),
            "depth": kw.get("depth", 1),
            "note": kw.get("note", ""),
        }
    )


def exemplars(shape: Shape) -> list[Exemplar]:
    slow = Exemplar(
        kind="slowest_ok",
        trace_id=TRACE_SLOW,
        window="during xid79",
        t=23.4,
        duration_s=2.9,
        status=200,
        spans=[
            _span("a1<", ("agent", "POST /chat"), 0.0, 2.9, depth=0),
            _span("a2<a1", ("agent", shape.name), 0.01, 2.3, note="toxic latency 2000 ms"),
            _span("a3<a1", ("agent", CHAT), 2.32, 0.55, note="model tiny"),
            _span("a4<a3", ("llm-primary", "llm_request"), 2.33, 0.5, depth=2),
        ],
    )
    out = [slow]
    if shape.failed:
        failed = [
            _span("b1<", ("agent", "POST /chat"), 0.0, 1.2, depth=0, status=SpanStatus.ERROR),
            _span("b2<b1", ("agent", shape.name), 0.01, 0.2),
            _span("b3<b1", ("agent", CHAT), 0.22, 0.9, status=SpanStatus.ERROR, note="attempt 1"),
            _span(
                "b4<b3",
                ("llm-primary", "llm_request"),
                0.23,
                0.3,
                depth=2,
                status=SpanStatus.ERROR,
                note="GPU has fallen off the bus",
            ),
            _span("b5<b1", ("agent", CHAT), 0.5, 0.6, status=SpanStatus.ERROR, note="attempt 2"),
        ]
        out.append(
            Exemplar(
                kind="failed",
                trace_id=TRACE_FAILED,
                window="during xid79",
                t=21.0,
                duration_s=1.25,
                status=502,
                spans=failed,
                truncated=2,
            )
        )
    return out


def summary(shape: Shape | None = None) -> TracesSummary:
    """A run's traces: the mover is agent/<shape.name> during xid79 (unless its share is low)."""
    shape = shape or Shape()
    base_shares = {k: v[0] for k, v in BASE_HOPS.items()}
    base_shares = {(s, shape.name if n == SEARCH else n): v for (s, n), v in base_shares.items()}
    search = ("agent", shape.name)
    fault_shares = dict(base_shares)
    rest = 1.0 - base_shares[search]
    for k in fault_shares:
        fault_shares[k] *= (1.0 - shape.search_share) / rest
    fault_shares[search] = shape.search_share
    base_hops = _hops(base_shares, traced=190, calls=shape.base_chat_calls, shape=Shape(name="-"))
    fault_hops = _hops(fault_shares, traced=190, calls=shape.chat_calls, shape=shape)
    rose = shape.search_share - base_shares[search]
    mover = (
        Mover(
            service="agent",
            span=shape.name,
            share=shape.search_share,
            baseline_share=base_shares[search],
            p99_s=2.3 if shape.search_share > 0.2 else 0.012,
            baseline_p99_s=0.012,
        )
        if rose > 0
        else None
    )
    return TracesSummary(
        spans=4321,
        traces=570,
        dropped=shape.dropped,
        rejected=shape.rejected,
        requests=600,
        requests_traced=570,
        services=["agent", "llm-primary", "tools", "embedder", "redis"],
        windows=[
            _window("baseline", WindowKind.BASELINE, (0, 20), base_hops),
            _window(
                "during xid79",
                WindowKind.FAULT,
                (20, 40),
                fault_hops,
                fault="xid79",
                mover=mover,
            ),
            _window("after recovery", WindowKind.RECOVERED, (50, 60), base_hops),
        ],
        exemplars=exemplars(shape),
    )


def write(run_dir: Path, shape: Shape | None = None) -> TracesSummary:
    """traces.json in the run folder, through the analysis's own writer."""
    s = summary(shape)
    write_traces(run_dir, s)
    return s
