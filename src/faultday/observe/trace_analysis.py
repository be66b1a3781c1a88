"""A run's spans, joined to its client requests, per window and per hop → ``traces.json``.

Pure: spans, windows and request records in, a ``TracesSummary`` out. How each figure
is computed is docs/traces-analysis.md; in short, every traced request's end-to-end
time is split along its trace's critical path (self time per hop, parallel children
counted once), the client's time beyond the agent's root span is the ``client/network``
hop, the fault proxy's spans are credited to the dependency call they relay, and a
vLLM ``llm_request`` span is split into queue, prefill and decode.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from faultday.core.journal import JournalWindow
from faultday.core.records import RequestRecord, percentile
from faultday.core.spans import AttrValue, Span, SpanKind, SpanStatus
from faultday.core.traces import (
    Exemplar,
    ExemplarKind,
    HopStats,
    Mover,
    TopHop,
    TracesSummary,
    WaterfallSpan,
    WindowTraces,
    write_traces,
)
from faultday.core.vocab import WindowKind
from faultday.core.windows import Window

__all__ = ["MAX_WATERFALL", "NO_SPANS_NOTE", "analyse", "write_traces"]

MAX_WATERFALL = 200  # spans per exemplar; the rest are counted in ``truncated``
NOTE_LIMIT = 160  # characters of a waterfall span's note
MAX_FAULTS = 20  # faults listed on one hop; the rest are counted
FAULT_TEXT_LIMIT = 120  # characters of one

CLIENT_SERVICE = "client"
CLIENT_SPAN = "network"
LLM_SPAN = "llm_request"
# The gen_ai.latency.* attributes vLLM (and its simulator) put on llm_request, in the
# order the phases happen; each becomes a pseudo-hop "llm_request <phase>".
LLM_PHASES = (
    ("queue", "gen_ai.latency.time_in_queue"),
    ("prefill", "gen_ai.latency.time_in_model_prefill"),
    ("decode", "gen_ai.latency.time_in_model_decode"),
)
PROXY_SERVICES = frozenset({"proxy", "faultday-proxy"})
EDGE_ATTRS = ("fault.edge", "proxy.edge")
FAULT_PREFIX = "fault."
TOXICS_ATTR = "fault.toxics"  # "latency(latency=500,jitter=0); bandwidth[upstream](rate=…)"
TOXIC_TYPES_ATTR = "fault.toxic.types"  # their types, when the texts are absent
TOXIC_PREFIX = "fault.toxic."  # types, count, latency_ms, jitter_ms: summaries of the texts
INJECTED_ATTR = "fault.injected_response"  # an http_error toxic answered, not the upstream
PROXY_FAULT_ATTRS = frozenset({*EDGE_ATTRS, TOXICS_ATTR, INJECTED_ATTR})
ADOPT_SCAN = 8  # proxies looked at around a sibling's start: retries make a few, not many
MODEL_ATTRS = ("gen_ai.response.model", "gen_ai.request.model", "llm.model", "model")
STATUS_ATTRS = ("http.response.status_code", "http.status_code")
ERROR_ATTRS = ("exception.message", "error.message", "error.type", "faultday.result")

NO_SPANS_NOTE = (
    "No spans were recorded for this run, so there are no traces to analyse. Turn tracing on"
    " with the stack profile's spec.collector (faultday then receives OTLP/HTTP spans for the"
    " run) and point each service at it: the {otlp} template in a component's environment, or"
    ' OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; see docs/traces.md, "In a stack profile".'
)
NOT_JOINED_NOTE = (
    "No client request carried a trace id that matches a recorded trace: windows count"
    " traces by their root span's start, and there is no client/network hop. A load that"
    " sends a W3C traceparent header (faultday's does) joins each request to its trace."
)
NO_ROOTS_NOTE = (
    "Spans were recorded but none of the run's traces has a root span (a span without a"
    " parent), so no request time can be attributed; were the agent's spans dropped?"
)

# A window kind's precedence when an exemplar's request lies in several windows.
_KIND_ORDER = {
    WindowKind.FAULT: 0,
    WindowKind.BASELINE: 1,
    WindowKind.RECOVERED: 2,
    WindowKind.AFTER: 3,
    WindowKind.RUN: 4,
    WindowKind.ABORT: 5,
}

_Hop = tuple[str, str]  # (service, span name)


@dataclass(slots=True)
class _Acc:
    """One hop's figures, summed over spans and then over traces."""

    count: int = 0
    errors: int = 0
    retries: int = 0  # spans with retry.attempt >= 2
    durations: list[float] = field(default_factory=list)
    time_ns: int = 0
    faults: set[str] = field(default_factory=set)

    def merge(self, other: _Acc) -> None:
        self.count += other.count
        self.errors += other.errors
        self.retries += other.retries
        self.durations.extend(other.durations)
        self.time_ns += other.time_ns
        self.faults |= other.faults


@dataclass(frozen=True, slots=True)
class _Trace:
    """One trace's spans, indexed once."""

    trace_id: str
    spans: tuple[Span, ...]  # deduplicated by span id, by start
    by_id: Mapping[str, Span]
    children: Mapping[str, tuple[Span, ...]]  # by start, as recorded
    path_children: Mapping[str, tuple[Span, ...]]  # the same, each proxy adopting its upstream
    tops: tuple[Span, ...]  # the spans whose parent is absent, by start: roots of subtrees

    @property
    def root(self) -> Span | None:
        """The trace's root: the agent's SERVER span (its parent, the load's, is not stored).

        When the agent's span was lost, the earliest of what is left stands in for it.
        """
        return min(
            self.tops,
            key=lambda s: (s.kind is not SpanKind.SERVER, s.start_ns, -s.end_ns, s.span_id),
            default=None,
        )

    def root_near(self, wall_ns: int) -> Span | None:
        """The root of the request that started at ``wall_ns``: a trace holds several when
        several requests share it (an agent task's submit and its polls)."""
        if len(self.tops) <= 1:
            return self.root
        return min(
            self.tops,
            key=lambda s: (s.kind is not SpanKind.SERVER, abs(s.start_ns - wall_ns), s.span_id),
        )


@dataclass(frozen=True, slots=True)
class _Item:
    """One analysed request: a client request joined to its trace, or a trace's root alone."""

    t: float  # run seconds it started
    e2e_ns: int  # its end-to-end time (client side; the root's when there is no client)
    hops: Mapping[_Hop, _Acc] | None  # None: joined, but another request owns its root
    trace: _Trace
    root: Span
    record: RequestRecord | None


def analyse(
    spans: Iterable[Span],
    windows: Sequence[JournalWindow | Window],
    requests: Sequence[RequestRecord],
    *,
    t0_wall: float,
    time_scale: float,
    dropped: int = 0,
    rejected: int = 0,
) -> TracesSummary:
    """The run's traces per window and per hop, and a few exemplar waterfalls."""
    if not time_scale > 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
    traces = _index(spans)
    n_spans = sum(len(t.spans) for t in traces.values())
    services = sorted({s.service for t in traces.values() for s in t.spans if s.service})
    items, joined = _join(traces, requests, t0_wall=t0_wall, time_scale=time_scale)
    attributed = sorted((i for i in items if i.hops is not None), key=lambda i: i.t)
    note = ""
    if not traces:
        note = NO_SPANS_NOTE
    elif not any(t.tops for t in traces.values()):
        note = NO_ROOTS_NOTE
    elif not joined:
        note = NOT_JOINED_NOTE
    window_traces = _windows(windows, attributed, requests)
    return TracesSummary(
        spans=n_spans,
        traces=len(traces),
        dropped=dropped,
        rejected=rejected,
        requests=len(requests),
        requests_traced=joined,
        services=services,
        windows=window_traces,
        exemplars=_exemplars(items, windows),
        note=note,
    )


# --- indexing and joining ---------------------------------------------------------------


def _index(spans: Iterable[Span]) -> dict[str, _Trace]:
    grouped: dict[str, dict[str, Span]] = defaultdict(dict)
    for s in spans:
        grouped[s.trace_id].setdefault(s.span_id, s)  # a span sent twice counts once
    return {tid: _trace(tid, by_id) for tid, by_id in grouped.items()}


def _trace(trace_id: str, by_id: dict[str, Span]) -> _Trace:
    ordered = tuple(sorted(by_id.values(), key=_by_start))
    children: dict[str, list[Span]] = defaultdict(list)
    parentless: list[Span] = []
    for s in ordered:
        if s.parent_id and s.parent_id in by_id and s.parent_id != s.span_id:
            children[s.parent_id].append(s)
        else:
            parentless.append(s)
    kids = {k: tuple(v) for k, v in children.items()}
    return _Trace(
        trace_id=trace_id,
        spans=ordered,
        by_id=by_id,
        children=kids,
        path_children=_adopted(kids),
        tops=tuple(parentless),
    )


def _adopted(children: dict[str, tuple[Span, ...]]) -> dict[str, tuple[Span, ...]]:
    """Children for the critical path: a proxy's upstream span moved under the proxy.

    The proxy passes the caller's traceparent on untouched (docs/proxy.md, "Traces"), so
    the upstream's SERVER span is the proxy span's sibling, inside it in time. Left so,
    the proxy span (which ends last) would hide the upstream's own time on the path.
    A SERVER sibling goes to the proxy it overlaps most, if that covers half of it or more
    (the caller's own calls are CLIENT or INTERNAL spans and stay where they are).
    """
    out = dict(children)
    for parent_id, kids in children.items():
        proxies = [k for k in kids if _is_proxy(k)]
        if not proxies or len(proxies) == len(kids):
            continue
        proxy_ids = {p.span_id for p in proxies}
        starts = [p.start_ns for p in proxies]  # kids, hence proxies, are by start
        adopted: dict[str, list[Span]] = defaultdict(list)
        kept: list[Span] = []
        for k in kids:
            proxy = None
            if k.span_id not in proxy_ids and k.kind is SpanKind.SERVER:
                proxy = _most_overlapping(proxies, starts, k)
            if proxy is None:
                kept.append(k)
            else:
                adopted[proxy.span_id].append(k)
        out[parent_id] = tuple(kept)
        for proxy_id, more in adopted.items():
            out[proxy_id] = tuple(sorted((*out.get(proxy_id, ()), *more), key=_by_start))
    return out


def _most_overlapping(proxies: Sequence[Span], starts: Sequence[int], span: Span) -> Span | None:
    at = bisect.bisect_right(starts, span.start_ns)
    best: tuple[int, Span] | None = None
    for p in proxies[max(0, at - ADOPT_SCAN) : at + ADOPT_SCAN]:
        overlap = min(p.end_ns, span.end_ns) - max(p.start_ns, span.start_ns)
        if overlap * 2 >= span.end_ns - span.start_ns > 0 and (best is None or overlap > best[0]):
            best = (overlap, p)
    return None if best is None else best[1]


def _by_start(s: Span) -> tuple[int, str]:
    return (s.start_ns, s.span_id)


def _join(
    traces: Mapping[str, _Trace],
    requests: Sequence[RequestRecord],
    *,
    t0_wall: float,
    time_scale: float,
) -> tuple[list[_Item], int]:
    """Requests joined to their traces by id (the count); with none joined, each root alone.

    Requests that share a trace (an agent task's submit and the task's own record, from
    submit to last poll) each take the root that started nearest them; when two take the
    same root, the shorter owns it (the request the root served) and the other is joined
    but not attributed: its time beyond that root is polling, not the network.
    """
    items: list[_Item] = []
    owners: dict[tuple[str, str], RequestRecord] = {}
    roots: dict[int, Span] = {}
    joined = 0
    for k, r in enumerate(requests):
        trace = traces.get(r.trace_id) if r.trace_id else None
        if trace is None:
            continue
        joined += 1
        root = trace.root_near(round((t0_wall + r.t * time_scale) * 1e9))
        if root is None:
            continue
        roots[k] = root
        key = (trace.trace_id, root.span_id)
        held = owners.get(key)
        if held is None or r.duration < held.duration:
            owners[key] = r
    owned = Counter(tid for tid, _ in owners)
    for k, root in roots.items():
        r = requests[k]
        trace = traces[r.trace_id]
        e2e_ns = max(0, round(r.duration * 1e9))
        hops = None
        if owners[(trace.trace_id, root.span_id)] is r:
            hops = _request_hops(trace, root, r, e2e_ns, whole=owned[trace.trace_id] == 1)
        items.append(_Item(t=r.t, e2e_ns=e2e_ns, hops=hops, trace=trace, root=root, record=r))
    if joined:
        return items, joined
    for trace in traces.values():
        root = trace.root
        if root is None:
            continue
        e2e_ns = max(0, root.end_ns - root.start_ns)
        t = (root.start_ns / 1e9 - t0_wall) / time_scale
        hops = _trace_hops(trace, root, cap_ns=e2e_ns)
        items.append(_Item(t=t, e2e_ns=e2e_ns, hops=hops, trace=trace, root=root, record=None))
    return items, 0


def _request_hops(
    trace: _Trace, root: Span, r: RequestRecord, e2e_ns: int, *, whole: bool
) -> dict[_Hop, _Acc]:
    """A request's hops: its root's, and the client's time beyond the root."""
    hops = _trace_hops(trace, root, cap_ns=e2e_ns, whole=whole)
    # The root is clipped to the client's time too, so the residual is never negative.
    root_ns = min(max(0, root.end_ns - root.start_ns), e2e_ns)
    hops[(CLIENT_SERVICE, CLIENT_SPAN)] = _Acc(
        count=1,
        errors=int(not r.ok and r.status == 0),  # no response at all
        durations=[(e2e_ns - root_ns) / 1e9],
        time_ns=e2e_ns - root_ns,
    )
    return hops


# --- one trace: per-hop figures and the critical path -------------------------------------


def _trace_hops(trace: _Trace, root: Span, *, cap_ns: int, whole: bool = True) -> dict[_Hop, _Acc]:
    """Per hop: every span's count, errors and duration; critical-path self time; faults.

    The counts cover the whole trace, or only ``root``'s subtree when the trace holds
    other requests' roots too (``whole=False``).
    """
    hops: dict[_Hop, _Acc] = {}

    def acc(hop: _Hop) -> _Acc:
        a = hops.get(hop)
        if a is None:
            a = hops[hop] = _Acc()
        return a

    attributed: dict[str, _Hop] = {}
    members = trace.spans if whole else [s for s, _ in _depth_first(trace, [root])]
    for s in members:
        hop = _attribution(trace, s, attributed)
        a = acc(hop)
        faults = _faults(s.attributes)
        if faults:
            a.faults.update(faults)
        if _is_proxy(s) and hop != (s.service, s.name):
            continue  # transparent: its time goes to the call it relays
        a.count += 1
        a.errors += s.status is SpanStatus.ERROR
        a.retries += (_number(s.attributes.get("retry.attempt")) or 0) >= 2  # attempt 2: a retry
        a.durations.append(s.duration_s)
        for phase, lo, hi in _llm_phases(s):
            p = acc((s.service, f"{LLM_SPAN} {phase}"))
            p.count += 1
            p.durations.append((hi - lo) / 1e9)
    end = root.start_ns + min(max(0, root.end_ns - root.start_ns), cap_ns)
    for hop, ns in _critical_path(trace, root, end, attributed).items():
        acc(hop).time_ns += ns
    return hops


def _critical_path(
    trace: _Trace, root: Span, end_ns: int, attributed: dict[str, _Hop]
) -> dict[_Hop, int]:
    """Self time along the critical path, by hop (nanoseconds; they sum to the root's time).

    From a span's end, the last-ending child is critical, then the last child that ends
    before that one starts, and so on; children are clipped to their parent's interval
    (clocks of different processes disagree), and each critical child is walked the same
    way. A span's self time is its interval less its critical children's. Iterative, so
    a deep trace cannot exhaust the stack. Written by hand: no maintained library
    computes a critical path over OTLP spans.
    """
    credits: dict[_Hop, int] = defaultdict(int)
    todo: list[tuple[Span, int, int]] = [(root, root.start_ns, end_ns)]
    seen: set[str] = set()
    while todo:
        span, lo, hi = todo.pop()
        if span.span_id in seen or hi <= lo:
            continue
        seen.add(span.span_id)
        chosen = _critical_children(trace.path_children.get(span.span_id, ()), lo, hi)
        gaps: list[tuple[int, int]] = []
        cursor = hi
        for c_lo, c_hi, child in chosen:
            gaps.append((c_hi, cursor))
            cursor = c_lo
            todo.append((child, c_lo, c_hi))
        gaps.append((lo, cursor))
        _credit(trace, span, gaps, credits, attributed)
    return credits


def _critical_children(kids: Sequence[Span], lo: int, hi: int) -> list[tuple[int, int, Span]]:
    """The critical children of a span clipped to [lo, hi], latest first."""
    if not kids:
        return []
    clipped = [(max(k.start_ns, lo), min(k.end_ns, hi), k) for k in kids]
    clipped = [c for c in clipped if c[1] > c[0]]
    clipped.sort(key=lambda c: (c[1], c[0]), reverse=True)
    chosen: list[tuple[int, int, Span]] = []
    cursor = hi
    for c in clipped:
        if c[1] <= cursor:
            chosen.append(c)
            cursor = c[0]
            if cursor <= lo:
                break
    return chosen


def _credit(
    trace: _Trace,
    span: Span,
    gaps: Sequence[tuple[int, int]],
    credits: dict[_Hop, int],
    attributed: dict[str, _Hop],
) -> None:
    """A span's self time (its gaps between critical children) to its hop or pseudo-hops."""
    self_ns = sum(max(0, b - a) for a, b in gaps)
    if not self_ns:
        return
    phases = _llm_phases(span)
    for phase, p_lo, p_hi in phases:
        covered = sum(max(0, min(b, p_hi) - max(a, p_lo)) for a, b in gaps)
        if covered:
            credits[(span.service, f"{LLM_SPAN} {phase}")] += covered
            self_ns -= covered
    if self_ns > 0:
        credits[_attribution(trace, span, attributed)] += self_ns


def _llm_phases(span: Span) -> list[tuple[str, int, int]]:
    """An llm_request's queue, prefill and decode laid out from its start, clipped to it."""
    if span.name != LLM_SPAN:
        return []
    out: list[tuple[str, int, int]] = []
    cursor = span.start_ns
    for phase, attr in LLM_PHASES:
        seconds = _number(span.attributes.get(attr))
        if seconds is None:
            continue
        lo = min(cursor, span.end_ns)
        room = span.end_ns - lo
        # Compared as floats first: a huge value must not overflow the integer nanoseconds.
        hi = span.end_ns if seconds * 1e9 >= room else lo + round(seconds * 1e9)
        out.append((phase, lo, hi))
        cursor = hi
    return out


def _is_proxy(span: Span) -> bool:
    attrs = span.attributes
    return span.service in PROXY_SERVICES or (bool(attrs) and any(a in attrs for a in EDGE_ATTRS))


def _attribution(trace: _Trace, span: Span, memo: dict[str, _Hop]) -> _Hop:
    """The hop a span's time counts for: its own, or for the proxy the call it relays."""
    hop = memo.get(span.span_id)
    if hop is not None:
        return hop
    hop = (span.service, span.name)
    if _is_proxy(span):
        parent = trace.by_id.get(span.parent_id)
        # Bounded: a proxy relaying a proxy is rare; a loop of ids must not hang us.
        for _ in range(len(trace.spans)):
            if parent is None or parent.span_id == span.span_id:
                break
            if not _is_proxy(parent):
                hop = (parent.service, parent.name)
                break
            if parent.span_id in memo:  # a chain of proxies is walked once, not once a link
                hop = memo[parent.span_id]
                break
            parent = trace.by_id.get(parent.parent_id)
    memo[span.span_id] = hop
    return hop


def _faults(attrs: Mapping[str, AttrValue]) -> list[str]:
    """The toxics a span names in its ``fault.*`` attributes (the proxy's, docs/proxy.md)."""
    out: list[str] = []
    if not attrs:
        return out
    toxics = attrs.get(TOXICS_ATTR)
    if isinstance(toxics, str) and toxics.strip():
        out.extend(_names(toxics, sep=";"))
    elif isinstance(types := attrs.get(TOXIC_TYPES_ATTR), str):
        out.extend(_names(types, sep=","))
    for key, value in attrs.items():
        # Other fault.* attributes (a fault another component names), key and value.
        if not key.startswith(FAULT_PREFIX) or key in PROXY_FAULT_ATTRS:
            continue
        if key.startswith(TOXIC_PREFIX):
            continue
        if value is True:
            out.append(key.removeprefix(FAULT_PREFIX))
        elif value not in (False, ""):
            out.append(f"{key.removeprefix(FAULT_PREFIX)} {value}")
    return out


def _names(text: str, *, sep: str) -> list[str]:
    """Names from a JSON array's text (how OTLP arrays are kept) or a separated list."""
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return [str(x) for x in parsed if str(x)]
    return [part.strip() for part in text.split(sep) if part.strip()]


def _number(value: AttrValue | None) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


# --- windows ------------------------------------------------------------------------------


def _windows(
    windows: Sequence[JournalWindow | Window],
    items: Sequence[_Item],
    requests: Sequence[RequestRecord],
) -> list[WindowTraces]:
    """Per window (a request counts in every window its start falls in, as the checks do)."""
    starts = [i.t for i in items]
    request_ts = sorted(r.t for r in requests)
    hops_of: list[list[HopStats]] = []
    inside_of: list[Sequence[_Item]] = []
    for w in windows:
        inside = items[bisect.bisect_left(starts, w.start) : bisect.bisect_left(starts, w.end)]
        inside_of.append(inside)
        hops_of.append(_window_hops(inside))
    base_at = next((k for k, w in enumerate(windows) if w.kind is WindowKind.BASELINE), None)
    baseline = {} if base_at is None else {(h.service, h.span): h for h in hops_of[base_at]}
    out: list[WindowTraces] = []
    for k, w in enumerate(windows):
        hops, inside = hops_of[k], inside_of[k]
        top = hops[0] if hops and hops[0].share > 0 else None
        n_requests = bisect.bisect_left(request_ts, w.end) - bisect.bisect_left(request_ts, w.start)
        out.append(
            WindowTraces(
                label=w.label,
                kind=str(w.kind),
                fault=w.fault or None,
                t0=w.start,
                t1=w.end,
                requests=n_requests,
                traced=len(inside),
                e2e_s=_s(sum(i.e2e_ns for i in inside)),
                hops=hops,
                top=TopHop(service=top.service, span=top.span, share=top.share) if top else None,
                mover=None if base_at in (None, k) else _mover(hops, baseline),
            )
        )
    return out


def _window_hops(items: Sequence[_Item]) -> list[HopStats]:
    total: dict[_Hop, _Acc] = {}
    for item in items:
        for hop, a in (item.hops or {}).items():
            mine = total.get(hop)
            if mine is None:
                mine = total[hop] = _Acc()
            mine.merge(a)
    e2e_ns = sum(i.e2e_ns for i in items)
    stats = [_hop_stats(hop, a, e2e_ns) for hop, a in total.items()]
    stats.sort(key=lambda h: (-h.share, -h.time_s, h.hop))
    return stats


def _hop_stats(hop: _Hop, a: _Acc, e2e_ns: int) -> HopStats:
    a.durations.sort()  # percentile re-sorts: on sorted input that is linear
    service, span = hop
    return HopStats(
        hop=f"{service}/{span}",
        service=service,
        span=span,
        count=a.count,
        errors=a.errors,
        error_share=round(a.errors / a.count, 6) if a.count else 0.0,
        p50_s=_r(percentile(a.durations, 50)) if a.durations else 0.0,
        p99_s=_r(percentile(a.durations, 99)) if a.durations else 0.0,
        time_s=_s(a.time_ns),
        share=round(min(1.0, a.time_ns / e2e_ns), 6) if e2e_ns > 0 else 0.0,
        faults=_bounded(sorted(a.faults)),
        retries=a.retries,
    )


def _bounded(faults: list[str]) -> list[str]:
    """A hop's faults, each and all bounded: a component may name a fault per request."""
    clipped = [f if len(f) <= FAULT_TEXT_LIMIT else f[: FAULT_TEXT_LIMIT - 1] + "…" for f in faults]
    if len(clipped) <= MAX_FAULTS:
        return clipped
    return [*clipped[:MAX_FAULTS], f"… {len(clipped) - MAX_FAULTS} more"]


def _mover(hops: Sequence[HopStats], baseline: Mapping[_Hop, HopStats]) -> Mover | None:
    best: tuple[float, HopStats] | None = None
    for h in hops:
        base = baseline.get((h.service, h.span))
        rise = h.share - (base.share if base else 0.0)
        if rise > 1e-9 and (best is None or rise > best[0]):
            best = (rise, h)
    if best is None:
        return None
    h = best[1]
    base = baseline.get((h.service, h.span))
    return Mover(
        service=h.service,
        span=h.span,
        share=h.share,
        baseline_share=base.share if base else 0.0,
        p99_s=h.p99_s,
        baseline_p99_s=base.p99_s if base else None,
    )


# --- exemplars ----------------------------------------------------------------------------


def _exemplars(items: Sequence[_Item], windows: Sequence[JournalWindow | Window]) -> list[Exemplar]:
    picks: dict[ExemplarKind, _Item] = {}
    for item in items:
        held = picks.get(kind := _exemplar_kind(item))
        if held is None or item.e2e_ns > held.e2e_ns:
            picks[kind] = item
    out: list[Exemplar] = []
    order: tuple[ExemplarKind, ...] = ("slowest_ok", "failed", "degraded")
    for kind, item in sorted(picks.items(), key=lambda p: order.index(p[0])):
        spans, truncated = _waterfall(item.trace, item.root)
        out.append(
            Exemplar(
                kind=kind,
                trace_id=item.trace.trace_id,
                window=_window_of(item.t, windows),
                t=round(item.t, 6),
                duration_s=_s(item.e2e_ns),
                status=_status(item),
                spans=spans,
                truncated=truncated,
            )
        )
    return out


def _exemplar_kind(item: _Item) -> ExemplarKind:
    r = item.record
    if r is None:
        return "failed" if item.root.status is SpanStatus.ERROR else "slowest_ok"
    if not r.ok:
        return "failed"
    return "degraded" if r.degraded else "slowest_ok"


def _status(item: _Item) -> int:
    if item.record is not None:
        return item.record.status
    for attr in STATUS_ATTRS:
        value = _number(item.root.attributes.get(attr))
        if value is not None:
            return int(value)
    return 0


def _window_of(t: float, windows: Sequence[JournalWindow | Window]) -> str:
    """The most telling window a time falls in: a fault's before the whole run's."""
    inside = [w for w in windows if w.start <= t < w.end]
    if not inside:
        return ""
    return min(inside, key=lambda w: _KIND_ORDER.get(w.kind, len(_KIND_ORDER))).label


def _waterfall(trace: _Trace, root: Span) -> tuple[list[WaterfallSpan], int]:
    """The trace depth first from the request's root, then its other subtrees; at most 200."""
    first = trace.spans[0].start_ns if trace.spans else 0
    out: list[WaterfallSpan] = []
    for span, depth in _depth_first(trace, [root, *(t for t in trace.tops if t is not root)]):
        if len(out) >= MAX_WATERFALL:
            break
        out.append(
            WaterfallSpan(
                span_id=span.span_id,
                parent_id=span.parent_id,
                service=span.service,
                name=span.name,
                start_s=_s(span.start_ns - first),
                duration_s=_r(span.duration_s),
                status=str(span.status),
                depth=depth,
                note=_note(span),
            )
        )
    return out, len(trace.spans) - len(out)


def _depth_first(trace: _Trace, tops: Sequence[Span]) -> Iterator[tuple[Span, int]]:
    seen: set[str] = set()
    stack = [(s, 0) for s in reversed(tops)]
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        yield span, depth
        kids = trace.children.get(span.span_id, ())
        stack.extend((k, depth + 1) for k in reversed(kids))


def _note(span: Span) -> str:
    """Model, retry attempt and backoff, toxics, status, error: what a reader looks for."""
    attrs = span.attributes
    parts = _call_notes(attrs)
    edge = next((attrs[a] for a in EDGE_ATTRS if attrs.get(a)), None)
    if edge is not None:
        parts.append(f"edge {edge}")
    parts.extend(f"toxic {f}" for f in _faults(attrs))
    if attrs.get(INJECTED_ATTR) is True:
        parts.append("answered by the proxy")
    phases = _llm_phases(span)
    if phases:
        parts.append(", ".join(f"{p} {(hi - lo) / 1e9:.3g} s" for p, lo, hi in phases))
    parts.extend(_agent_notes(attrs))
    parts.extend(_outcome_notes(span))
    note = "; ".join(parts)
    return note if len(note) <= NOTE_LIMIT else note[: NOTE_LIMIT - 1] + "…"


def _call_notes(attrs: Mapping[str, AttrValue]) -> list[str]:
    parts: list[str] = []
    model = next((attrs[a] for a in MODEL_ATTRS if attrs.get(a)), None)
    if model is not None:
        parts.append(f"model {model}")
    attempt = _number(attrs.get("retry.attempt"))
    if attempt is not None:
        parts.append(f"attempt {int(attempt)}")
    backoff = _number(attrs.get("retry.backoff_s", attrs.get("retry.backoff")))
    if backoff:
        parts.append(f"backoff {backoff:g} s")
    attempts = _number(attrs.get("faultday.attempts"))
    if attempts is not None and attempts > 1:
        parts.append(f"{int(attempts)} attempts")
    return parts


def _outcome_notes(span: Span) -> list[str]:
    parts: list[str] = []
    for attr in STATUS_ATTRS:
        code = _number(span.attributes.get(attr))
        if code is not None and code >= 400:
            parts.append(f"HTTP {int(code)}")
            break
    if span.status is SpanStatus.ERROR:
        attrs = span.attributes
        why = span.status_message or next((str(attrs[a]) for a in ERROR_ATTRS if attrs.get(a)), "")
        parts.append(f"error: {why}" if why else "error")
    return parts


def _agent_notes(attrs: Mapping[str, AttrValue]) -> list[str]:
    """What the reference agent says of a call (docs/agent.md): tool, breaker, fallback."""
    parts: list[str] = []
    if tool := attrs.get("gen_ai.tool.name"):
        parts.append(f"tool {tool}")
    breaker = attrs.get("breaker.state")
    if breaker and breaker != "closed":
        parts.append(f"breaker {breaker}")
    if fallback := attrs.get("faultday.fallback.to"):
        parts.append(f"fallback to {fallback}")
    if attrs.get("faultday.canned") is True:
        parts.append("canned answer")
    reasons = attrs.get("faultday.degraded_reasons")
    if isinstance(reasons, str) and reasons.strip("[]"):
        parts.append(f"degraded: {', '.join(_names(reasons, sep=','))}")
    return parts


def _s(ns: int) -> float:
    return round(ns / 1e9, 6)


def _r(seconds: float) -> float:
    return round(seconds, 6)
