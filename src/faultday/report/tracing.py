"""Where the time went: what a report shows of a run's traces (``traces.json``).

Per window the hops' shares of request time, the hop whose share rose most against
the baseline (the mover), and exemplar requests drawn as waterfalls: an inline SVG
for HTML, an indented text tree for Markdown. Span names, services and notes come
from the system under test: the SVG escapes every one of them here, the Markdown
tree goes into a fenced block, and every other field is escaped by the templates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from markupsafe import escape

from faultday.core.journal import JournalWindow
from faultday.core.spans import SpanStatus
from faultday.core.traces import (
    TRACES_NAME,
    Exemplar,
    HopStats,
    TracesSummary,
    WaterfallSpan,
    WindowTraces,
    read_traces,
)
from faultday.core.vocab import WindowKind
from faultday.errors import FaultdayError
from faultday.report.markdown import one_line

log = logging.getLogger(__name__)

TOP_HOPS = 6  # hops drawn by name in the chart; the rest are folded into OTHER
TABLE_ROWS = 8  # hops listed by name in a window's table; the rest are one OTHER row
OTHER = "other"
# The windows that overlap no other: the baseline, each fault, the recovered end.
SHOWN_KINDS = (WindowKind.BASELINE, WindowKind.FAULT, WindowKind.RECOVERED)
NO_TRACES = (
    "No traces in this run: no traces.json in the run folder, so no span was collected. "
    "Tracing is on when the harness's trace collector runs and the stack's services export "
    "OTLP/HTTP to it (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); see docs/traces.md."
)
EXEMPLAR_TITLES = {
    "slowest_ok": "Slowest request that succeeded",
    "failed": "A failed request",
    "degraded": "A request served degraded",
}
TREE_DEPTH_MAX = 16  # indentation stops growing here; a deeper span is still listed


@dataclass(frozen=True, slots=True)
class HopRow:
    hop: str
    share: float
    p50_s: float | None  # None for the row of the other hops
    p99_s: float | None
    count: int
    errors: int
    faults: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WindowTime:
    """One window's hops and the sentence that says what moved."""

    label: str
    kind: str
    requests: int
    traced: int
    sentence: str
    rows: tuple[HopRow, ...]


@dataclass(frozen=True, slots=True)
class Waterfall:
    """One exemplar request: an SVG for HTML (escaped here) and a text tree for Markdown."""

    kind: str
    title: str
    trace_id: str
    window: str
    t: float
    duration_s: float
    status: int
    spans: int
    truncated: int
    svg: str
    tree: str


@dataclass(frozen=True, slots=True)
class TimeSpent:
    """The report's "Where the time went" section; ``note`` alone when there is nothing to show."""

    note: str = NO_TRACES
    coverage: str = ""
    caps: str = ""
    baseline: str = ""
    windows: tuple[WindowTime, ...] = ()
    waterfalls: tuple[Waterfall, ...] = ()
    # The chart's bars: per window, (hop, share) for the top hops and OTHER, in legend order.
    bars: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    @property
    def shown(self) -> bool:
        return bool(self.windows)


def load_traces(run_dir: Path) -> tuple[TracesSummary | None, str]:
    """The run's ``traces.json`` and, when it could not be read, why."""
    try:
        return read_traces(run_dir), ""
    except (FaultdayError, OSError) as exc:
        log.warning("%s", exc)
        return None, f"{TRACES_NAME} could not be read: {exc}"


def window_traces(summary: TracesSummary | None, w: JournalWindow) -> WindowTraces | None:
    """The traces of a journal window: by its label, else a fault window by its fault."""
    if summary is None:
        return None
    for wt in summary.windows:
        if wt.label == w.label:
            return wt
    if w.kind == WindowKind.FAULT and w.fault:
        return next(
            (wt for wt in summary.windows if wt.kind == WindowKind.FAULT and wt.fault == w.fault),
            None,
        )
    return None


def baseline_traces(summary: TracesSummary | None) -> WindowTraces | None:
    if summary is None:
        return None
    return next((wt for wt in summary.windows if wt.kind == WindowKind.BASELINE), None)


def pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def dur(seconds: float | None) -> str:
    """A duration as a reader wants it: 12 ms, 2.3 s."""
    if seconds is None:
        return "not seen"
    if seconds <= 0:
        return "0 ms"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def _hop_of(wt: WindowTraces, service: str, span: str) -> HopStats | None:
    return next((h for h in wt.hops if h.service == service and h.span == span), None)


def _faults_on(hop: HopStats | None) -> str:
    if hop is None or not hop.faults:
        return ""
    return f" Faults seen on this hop: {', '.join(hop.faults)}."


def _during(wt: WindowTraces) -> str:
    if wt.kind == WindowKind.FAULT:
        return f"During {wt.fault or wt.label}"
    if wt.kind == WindowKind.BASELINE:
        return "In the baseline"
    return f"In the window {wt.label}"


def sentence(wt: WindowTraces) -> str:
    """What a window's traces say, in one sentence (two when faults were seen on the hop)."""
    if not wt.traced:
        return f"{_during(wt)}, no traced request started."
    m = wt.mover
    if m is not None:
        hop = f"{m.service}/{m.span}"
        return (
            f"{_during(wt)}, {pct(m.share)} of request time was in {hop}, "
            f"p99 {dur(m.p99_s)} (baseline {dur(m.baseline_p99_s)}; "
            f"{pct(m.baseline_share)} of request time then)."
            + _faults_on(_hop_of(wt, m.service, m.span))
        )
    top = wt.top
    if top is None:
        return f"{_during(wt)}, the traces name no hop."
    rose = "" if wt.kind == WindowKind.BASELINE else " no hop's share rose against the baseline;"
    return (
        f"{_during(wt)},{rose} the top hop was {top.service}/{top.span} with "
        f"{pct(top.share)} of request time." + _faults_on(_hop_of(wt, top.service, top.span))
    )


def _rows(wt: WindowTraces) -> tuple[HopRow, ...]:
    """The window's largest hops; the rest summed into one row (its p50/p99 are not summable)."""
    hops = sorted(wt.hops, key=lambda h: -h.share)
    rows = [
        HopRow(h.hop, h.share, h.p50_s, h.p99_s, h.count, h.errors, tuple(h.faults))
        for h in hops[:TABLE_ROWS]
    ]
    rest = hops[TABLE_ROWS:]
    if rest:
        faults = tuple(sorted({f for h in rest for f in h.faults}))
        rows.append(
            HopRow(
                f"{OTHER} ({len(rest)} hop{'s' if len(rest) > 1 else ''})",
                sum(h.share for h in rest),
                None,
                None,
                sum(h.count for h in rest),
                sum(h.errors for h in rest),
                faults,
            )
        )
    return tuple(rows)


def _bars(
    windows: list[WindowTraces],
) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """Per window the shares of the top hops (by their largest share anywhere) and the rest."""
    best: dict[str, float] = {}
    for wt in windows:
        for h in wt.hops:
            best[h.hop] = max(best.get(h.hop, 0.0), h.share)
    top = sorted(best, key=lambda k: (-best[k], k))[:TOP_HOPS]
    out = []
    for wt in windows:
        shares = {h.hop: h.share for h in wt.hops}
        named = [(k, shares.get(k, 0.0)) for k in top]
        rest = sum(s for k, s in shares.items() if k not in top)
        out.append((wt.label, (*named, *([(OTHER, rest)] if len(best) > len(top) else []))))
    return tuple(out)


def _caps(summary: TracesSummary) -> str:
    parts = []
    if summary.dropped:
        parts.append(
            f"the trace collector dropped {summary.dropped:,} spans past its cap: once it was "
            "full it kept no more, so traces from then on are missing or cut short and the "
            "shares of those windows rest on fewer requests"
        )
    if summary.rejected:
        parts.append(
            f"it refused {summary.rejected:,} export bodies (malformed, too large or of a "
            "type it does not read; HTTP 400/413/415): the spans in them are missing"
        )
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if text else ""


def _coverage(summary: TracesSummary) -> str:
    share = f" ({pct(summary.requests_traced / summary.requests)})" if summary.requests else ""
    return (
        f"{summary.spans:,} spans in {summary.traces:,} traces from "
        f"{', '.join(summary.services) or 'no named service'}; "
        f"{summary.requests_traced:,} of {summary.requests:,} client requests joined to their "
        f"spans{share}."
    )


def time_spent(summary: TracesSummary | None, *, problem: str = "") -> TimeSpent:
    """The section from a run's traces; a note saying why (and how to trace) when there are none."""
    if summary is None:
        return TimeSpent(note=problem or NO_TRACES)
    windows = [w for w in summary.windows if w.kind in SHOWN_KINDS] or list(summary.windows)
    if not summary.spans or not any(w.traced for w in windows):
        return TimeSpent(note=summary.note or NO_TRACES, caps=_caps(summary))
    base = baseline_traces(summary)
    return TimeSpent(
        note="",
        coverage=_coverage(summary),
        caps=_caps(summary),
        baseline=sentence(base) if base is not None and base.traced else "",
        windows=tuple(
            WindowTime(w.label, w.kind, w.requests, w.traced, sentence(w), _rows(w))
            for w in windows
        ),
        waterfalls=tuple(waterfall(e) for e in summary.exemplars),
        bars=_bars([w for w in windows if w.traced]),
    )


# ---- waterfalls ---------------------------------------------------------------------------


def _is_error(s: WaterfallSpan) -> bool:
    return s.status == SpanStatus.ERROR


def tree(spans: list[WaterfallSpan]) -> str:
    """``name  service  start+dur  note``, indented by depth: one line per span, text only."""
    lines = []
    for s in spans:
        indent = "  " * min(s.depth, TREE_DEPTH_MAX)
        note = " ".join(p for p in ("ERROR" if _is_error(s) else "", one_line(s.note)) if p)
        cols = [
            one_line(s.name) or "?",
            one_line(s.service),
            f"{dur(s.start_s)}+{dur(s.duration_s)}",
        ]
        lines.append(indent + "  ".join([*cols, note] if note else cols))
    return "\n".join(lines)


# The waterfall is drawn by hand rather than with matplotlib: it is a few rectangles and
# labels placed exactly where each span starts, ends and nests, and matplotlib would read
# "$" in a span name as mathematics. Every text goes through escape().
_W, _ROW, _LABEL_W, _TOP = 960, 18, 340, 22
_BAR_X = _LABEL_W + 10
_BAR_W = _W - _BAR_X - 70
_INDENT = 12
_LABEL_CHARS = 46
_PALETTE = ("#2e86ab", "#6a4c93", "#3bb273", "#f3a712", "#8d6a9f", "#4f6d7a")
_ERROR = "#c0392b"


def _short(text: str, room: int) -> str:
    text = one_line(text)
    return text if len(text) <= room else text[: max(1, room - 1)] + "…"


def waterfall(e: Exemplar) -> Waterfall:
    return Waterfall(
        kind=e.kind,
        title=EXEMPLAR_TITLES.get(e.kind, e.kind),
        trace_id=e.trace_id,
        window=e.window,
        t=e.t,
        duration_s=e.duration_s,
        status=e.status,
        spans=len(e.spans),
        truncated=e.truncated,
        svg=waterfall_svg(e),
        tree=tree(e.spans),
    )


def waterfall_svg(e: Exemplar) -> str:
    """An exemplar as a self-contained SVG: bars by start and duration, labels by depth."""
    total = max([e.duration_s, *(s.start_s + s.duration_s for s in e.spans), 1e-9])
    colours: dict[str, str] = {}
    height = _TOP + _ROW * len(e.spans) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="waterfall-svg" viewBox="0 0 {_W} '
        f'{height}" width="100%" role="img" font-family="Arial, Helvetica, sans-serif" '
        f'font-size="11" aria-label="{escape(f"waterfall of trace {e.trace_id}")}">',
        f"<title>{escape(f'trace {e.trace_id}')}</title>",
    ]
    for i in range(5):
        x = _BAR_X + _BAR_W * i / 4
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{height - 6}" '
            'stroke="#ddd" stroke-width="1"/>'
            f'<text x="{x:.1f}" y="{_TOP - 8}" text-anchor="middle" fill="#666">'
            f"{escape(dur(total * i / 4))}</text>"
        )
    for row, s in enumerate(e.spans):
        out.append(_span_row(s, row, total, colours))
    out.append("</svg>")
    return "".join(out)


def _span_row(s: WaterfallSpan, row: int, total: float, colours: dict[str, str]) -> str:
    y = _TOP + row * _ROW
    depth = min(s.depth, TREE_DEPTH_MAX)
    x = _BAR_X + _BAR_W * s.start_s / total
    w = max(1.5, _BAR_W * s.duration_s / total)
    bad = _is_error(s)
    fill = _ERROR if bad else colours.setdefault(s.service, _PALETTE[len(colours) % len(_PALETTE)])
    label = _short(s.name, _LABEL_CHARS - depth * 2)
    room = max(0, _LABEL_CHARS - depth * 2 - len(label) - 1)
    service = _short(s.service, room) if room > 3 else ""
    hover = " ".join(
        p
        for p in (
            f"{s.service}/{s.name}",
            f"+{dur(s.start_s)}",
            dur(s.duration_s),
            s.status,
            s.note,
        )
        if p
    )
    end = (
        dur(s.duration_s)
        + (" error" if bad else "")
        + (f" · {_short(s.note, 40)}" if s.note else "")
    )
    text_w = len(end) * 6.2  # Arial at 11 px, about; the SVG cannot measure its own text
    if x + w + 4 + text_w <= _W - 2:  # after the bar
        at, anchor, colour = x + w + 4, "start", _ERROR if bad else "#555"
    elif x - 4 - text_w >= _BAR_X:  # before it: the row is empty there
        at, anchor, colour = x - 4, "end", _ERROR if bad else "#555"
    else:  # a bar across the whole trace: inside it
        at, anchor, colour = x + 4, "start", "#fff"
    out = [
        f'<g class="span{" span-error" if bad else ""}"><title>{escape(one_line(hover))}</title>',
        f'<text x="{4 + depth * _INDENT}" y="{y + 13}" fill="{_ERROR if bad else "#222"}">'
        f"{'✖ ' if bad else ''}{escape(label)}"
        f'<tspan fill="#888" font-weight="normal"> {escape(service)}</tspan></text>',
        f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{_ROW - 6}" rx="2" fill="{fill}"'
        + (f' stroke="{_ERROR}" stroke-width="1.5"' if bad else "")
        + "/>",
        f'<text x="{at:.1f}" y="{y + 13}" text-anchor="{anchor}" fill="{colour}">'
        f"{escape(end)}</text>",
        "</g>",
    ]
    return "".join(out)


def first_error(spans: list[WaterfallSpan]) -> WaterfallSpan | None:
    """The span whose error came first: the one with error status that ended first.

    A caller fails after, and because of, the call it made: by start time the root
    (the agent) would always come first; by end time the hop that failed does. Among
    spans ending together the deepest is the cause.
    """
    bad = [s for s in spans if _is_error(s)]
    return min(bad, key=lambda s: (s.start_s + s.duration_s, -s.depth), default=None)
