"""Charts as inline SVG (matplotlib's SVG canvas), fault windows shaded and labelled."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from faultday.core.journal import Journal
from faultday.core.vocab import CATALOGUE, STEADY_WINDOWS, EventKind, WindowKind
from faultday.report import energy as en
from faultday.report import tracing as tr
from faultday.report.series import Series, SeriesSet
from faultday.report.view import Chart

FAULT_COLOURS = ("#e4572e", "#f3a712", "#a23b72", "#2e86ab", "#6a4c93", "#3bb273")
_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.S)
_ID = re.compile(r'\b(id)="([^"]+)"')
_URL_REF = re.compile(r"url\(#([^)]+)\)")
_HREF = re.compile(r'((?:xlink:)?href)="#([^"]+)"')


def _fault_spans(journal: Journal) -> list[tuple[str, float, float, bool]]:
    """(name, start, end, happened) per fault; planned times when it never ran."""
    out = []
    for f in journal.faults:
        if f.injected_at is not None:
            end = (
                f.reverted_at if f.reverted_at is not None else f.injected_at + (f.duration or 0.0)
            )
            out.append((f.name, f.injected_at, max(end, f.injected_at + 0.05), True))
        else:
            out.append((f.name, f.at, f.at + (f.duration or 0.05), False))
    if not out:  # an old journal without faults: fall back on the planned windows
        out = [
            (w.fault or w.label, w.start, w.end, False)
            for w in journal.windows
            if w.kind == WindowKind.FAULT
        ]
    return out


def _x_end(journal: Journal) -> float:
    last = max((e.t for e in journal.events), default=0.0)
    return max(journal.duration, last, 1.0)


def rest_spans(journal: Journal) -> list[tuple[float, float]]:
    """The windows a chart shades grey as the stack at rest: baseline and after recovery."""
    return [(w.start, w.end) for w in journal.windows if w.kind in STEADY_WINDOWS]


def _marked(kind: str) -> bool:
    known = EventKind._value2member_map_.get(kind)
    return isinstance(known, EventKind) and CATALOGUE[known].marked


def _shade(ax: Axes, journal: Journal) -> None:
    # Fault names go in the legend, not as text at the window's start: faults that start
    # together would print their names on top of each other.
    seen: set[str] = set()
    for i, (name, start, end, happened) in enumerate(_fault_spans(journal)):
        colour = FAULT_COLOURS[i % len(FAULT_COLOURS)]
        label = f"{name}" + ("" if happened else " (planned)")
        ax.axvspan(
            start,
            end,
            color=colour,
            alpha=0.15 if happened else 0.06,
            lw=0,
            label=f"fault: {label}" if name not in seen else None,
        )
        seen.add(name)
    for ev in journal.events:
        if ev.kind == EventKind.ABORT:
            ax.axvline(ev.t, color="#c00", lw=1.2, ls="--")
            ax.text(
                ev.t, 0.5, " abort", color="#c00", transform=ax.get_xaxis_transform(), fontsize=8
            )


def _figure(height: float = 2.6) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(9.0, height), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3, lw=0.5)
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=8)
    return fig, ax


def _legend_above(ax: Axes) -> None:
    """The legend above the plot, so every chart keeps the same plot width and the x axes
    line up."""
    ax.legend(
        fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.02), ncol=4, frameon=False,
        borderaxespad=0.0,
    )  # fmt: skip


def _svg(fig: Figure, salt: str) -> str:
    buf = io.StringIO()
    # Text as text (small, selectable); a salt per chart keeps element ids unique in one page.
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg")
    return _prefix_ids(_PROLOGUE.sub("", buf.getvalue(), count=1).strip(), salt)


def _prefix_ids(svg: str, prefix: str) -> str:
    """Make every element id (and reference to one) unique to this chart within a page."""
    p = re.sub(r"[^A-Za-z0-9_-]", "-", prefix)
    svg = _ID.sub(lambda m: f'{m.group(1)}="{p}-{m.group(2)}"', svg)
    svg = _URL_REF.sub(lambda m: f"url(#{p}-{m.group(1)})", svg)
    return _HREF.sub(lambda m: f'{m.group(1)}="#{p}-{m.group(2)}"', svg)


def _plot(ax: Axes, s: Series, label: str, *, scale: float = 1.0) -> None:
    ax.plot(s.t, [v * scale for v in s.v], label=label, lw=1.3, drawstyle="steps-post")


def timeline_chart(journal: Journal) -> Chart:
    spans = _fault_spans(journal)
    fig, ax = _figure(1.0 + 0.35 * max(1, len(spans)))
    for i, (_name, start, end, happened) in enumerate(spans):
        colour = FAULT_COLOURS[i % len(FAULT_COLOURS)]
        ax.barh(
            i,
            end - start,
            left=start,
            color=colour,
            alpha=0.85 if happened else 0.25,
            hatch=None if happened else "//",
            edgecolor=colour,
        )
    ax.set_yticks(range(len(spans)), [s[0] for s in spans], fontsize=8)
    ax.invert_yaxis()
    for start, end in rest_spans(journal):
        ax.axvspan(start, end, color="#888", alpha=0.06, lw=0)
    for ev in journal.events:
        if _marked(ev.kind):
            ax.axvline(
                ev.t,
                color="#c00",
                lw=0.8,
                ls="--" if ev.kind == EventKind.ABORT else ":",
            )
    ax.set_xlim(min(0.0, *(s[1] for s in spans)) if spans else 0.0, _x_end(journal))
    ax.set_xlabel("scenario time (s)", fontsize=8)
    return Chart("timeline", "Fault timeline", _svg(fig, f"{journal.run_id}-timeline"))


def _line_chart(
    journal: Journal,
    name: str,
    title: str,
    lines: Sequence[tuple[Series, str, float]],
    ylabel: str,
) -> Chart:
    fig, ax = _figure()
    for s, label, scale in lines:
        _plot(ax, s, label, scale=scale)
    _shade(ax, journal)
    ax.set_xlim(left=min(0.0, *(s.t[0] for s, _, _ in lines if s.t)), right=_x_end(journal))
    ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_xlabel("scenario time (s)", fontsize=8)
    _legend_above(ax)
    return Chart(name, title, _svg(fig, f"{journal.run_id}-{name}"))


def make_charts(journal: Journal, series: SeriesSet) -> list[Chart]:
    """The fault timeline always; latency, throughput and degraded share when the run has series."""
    charts = [timeline_chart(journal)]
    if not series:
        return charts
    lat = [
        (s, label, 1000.0)
        for key, label in (
            ("load_e2e_p50", "e2e p50"),
            ("load_e2e_p99", "e2e p99"),
            ("load_ttft_p50", "TTFT p50"),
            ("load_ttft_p99", "TTFT p99"),
        )
        if (s := series.get(key)) is not None
    ]
    if lat:
        charts.append(
            _line_chart(journal, "latency", "Latency p50/p99 and time to first token", lat, "ms")
        )
    interval = series.interval()
    tput = [
        (s, label, scale)
        for key, label, scale in (
            ("load_rps", "requests/s", 1.0),
            ("load_errors", "errors/s", 1.0 / interval),
        )
        if (s := series.get(key)) is not None
    ]
    if tput:
        charts.append(
            _line_chart(journal, "throughput", "Requests/s and errors/s", tput, "per second")
        )
    deg = [(s, s.label("reason"), 100.0) for s in series.all("load_degraded_share") if s.labels]
    total = series.get("load_degraded_share")
    if total is not None:
        deg.insert(0, (total, "all degraded", 100.0))
    if deg:
        charts.append(
            _line_chart(journal, "degraded", "Degraded share by reason", deg, "% of requests")
        )
    return charts + gpu_charts(journal, series) + process_charts(journal, series)


def gpu_charts(journal: Journal, series: SeriesSet) -> list[Chart]:
    """SM clock and power per GPU replica, from dcgm-exporter's fields on its /metrics."""
    out = []
    for name, field, title, unit in (
        ("sm-clock", en.SM_CLOCK, "GPU SM clock (DCGM_FI_DEV_SM_CLOCK)", "MHz"),
        ("power", en.POWER, "GPU power (DCGM_FI_DEV_POWER_USAGE)", "W"),
    ):
        lines = [
            (s, s.label("component"), 1.0)
            for c in en.gpu_components(series)
            for s in en.component_series(series, field, c)[:1]
        ]
        if lines:
            out.append(_line_chart(journal, name, title, lines, unit))
    return out


# Written by the process sampler of a soak (faultday.observe.procs); named here because the
# report reads only the run's files, never another part.
PROC_RSS = "proc_rss_bytes"
PROC_FDS = "proc_open_fds"


def process_charts(journal: Journal, series: SeriesSet) -> list[Chart]:
    """A soak's resident memory and open FDs per component (``load.shape: soak``)."""
    out = []
    for name, field, title, unit, scale in (
        ("rss", PROC_RSS, "Resident memory per component (RSS of its process tree)", "MiB", 2**-20),
        ("fds", PROC_FDS, "Open file descriptors per component", "FDs", 1.0),
    ):
        lines = [(s, s.label("component"), scale) for s in series.all(field)]
        if lines:
            out.append(_line_chart(journal, name, title, lines, unit))
    return out


HOP_COLOURS = ("#2e86ab", "#e4572e", "#3bb273", "#f3a712", "#6a4c93", "#a23b72")
OTHER_COLOUR = "#bbbbbb"


def _clip(label: str, room: int = 40) -> str:
    """A legend or tick label short enough to leave the plot its room (tables name it in full)."""
    return label if len(label) <= room else label[: room - 1] + "…"


def time_share_chart(
    journal: Journal, bars: Sequence[tuple[str, Sequence[tuple[str, float]]]]
) -> Chart:
    """Per window, the share of request time in each hop, stacked to 100 %."""
    # Hop and window names are the stack's text: a "$" in one must not start mathematics.
    with mpl.rc_context({"text.parse_math": False}):
        fig, ax = _figure(1.2 + 0.45 * max(1, len(bars)))
        hops = [hop for hop, _ in bars[0][1]] if bars else []
        left = [0.0] * len(bars)
        for i, hop in enumerate(hops):
            shares = [dict(row).get(hop, 0.0) * 100 for _, row in bars]
            colour = OTHER_COLOUR if hop == tr.OTHER else HOP_COLOURS[i % len(HOP_COLOURS)]
            label = _clip(hop)
            ax.barh(range(len(bars)), shares, left=left, color=colour, label=label, height=0.6)
            left = [a + b for a, b in zip(left, shares, strict=True)]
        ax.set_yticks(range(len(bars)), [_clip(label) for label, _ in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of request time (%)", fontsize=8)
        _legend_above(ax)
        return Chart("hops", "Share of request time per hop", _svg(fig, f"{journal.run_id}-ts"))
