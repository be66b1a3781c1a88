"""The evidence a diagnosis rule may ask for: named figures of one window of a run.

Each signal is computed from the run's own records (``timeseries.csv`` and the
journal), for one window compared with the baseline, either for the whole run
(``Scope.RUN``: what the clients and the agent saw) or per GPU replica
(``Scope.REPLICA``: what its dcgm-exporter and vLLM metrics said). A signal
the run has no data for is ``None``: a rule never fires on missing evidence.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from faultday.core.journal import Journal, JournalWindow
from faultday.core.spans import SpanStatus
from faultday.core.traces import TracesSummary, WindowTraces
from faultday.core.vocab import WindowKind
from faultday.report import energy as en
from faultday.report import tracing as tr
from faultday.report.series import Series, SeriesSet


class Scope(StrEnum):
    RUN = "run"
    REPLICA = "replica"


class Signal(StrEnum):
    """Every figure a rule can test (docs/reports.md lists them with their units)."""

    # per GPU replica: dcgm-exporter
    SM_CLOCK_RATIO = "sm_clock_ratio"
    POWER_RATIO = "power_ratio"
    THROTTLE_SECONDS = "throttle_seconds"
    GPU_TEMP = "gpu_temp"
    XID = "xid"
    GPU_UTIL = "gpu_util"
    FB_USED_SHARE = "fb_used_share"
    FB_FREE_RATIO = "fb_free_ratio"
    PCIE_REPLAYS = "pcie_replays"
    TOKENS_PER_JOULE_RATIO = "tokens_per_joule_ratio"
    # per GPU replica: vLLM
    TOKEN_RATE_RATIO = "token_rate_ratio"  # noqa: S105 - a signal's name, not a secret
    PREFIX_HIT_RATE_RATIO = "prefix_hit_rate_ratio"
    PREEMPTIONS = "preemptions"
    WAITING = "waiting"
    METRICS_UP = "metrics_up"
    # the whole run: load and agent
    P99_RATIO = "p99_ratio"
    TTFT_P99_RATIO = "ttft_p99_ratio"
    ERROR_RATE = "error_rate"
    THROUGHPUT_RATIO = "throughput_ratio"
    FALLBACK_SHARE = "fallback_share"
    BREAKER_TRANSITIONS = "breaker_transitions"
    RETRY_AMPLIFICATION = "retry_amplification"
    TOOL_QUEUE = "tool_queue"
    ADMISSION_REJECTED = "admission_rejected"
    # the whole run: its traces (traces.json); None for every window of a run without them
    HOP_SHARE_RISE = "hop_share_rise"
    HOP_CALLS_RATIO = "hop_calls_ratio"
    REPEATED_SPANS = "repeated_spans"
    HOP_RETRIES = "hop_retries"
    ERROR_SPANS = "error_spans"


REPLICA_SIGNALS = frozenset(
    {
        Signal.SM_CLOCK_RATIO,
        Signal.POWER_RATIO,
        Signal.THROTTLE_SECONDS,
        Signal.GPU_TEMP,
        Signal.XID,
        Signal.GPU_UTIL,
        Signal.FB_USED_SHARE,
        Signal.FB_FREE_RATIO,
        Signal.PCIE_REPLAYS,
        Signal.TOKENS_PER_JOULE_RATIO,
        Signal.TOKEN_RATE_RATIO,
        Signal.PREFIX_HIT_RATE_RATIO,
        Signal.PREEMPTIONS,
        Signal.WAITING,
        Signal.METRICS_UP,
    }
)

PREEMPTIONS = "vllm:num_preemptions_total"
WAITING = "vllm:num_requests_waiting"
SCRAPE_UP = "faultday_scrape_up"
BREAKER_TRANSITIONS = "faultday_agent_breaker_transitions_total"
PROXY_REQUESTS = "faultday_proxy_http_requests_total"
PROXY_FAILED_DIALS = "faultday_proxy_upstream_failures_total"
TOOL_QUEUE = "faultday_tools_queue_depth"
ADMISSION_REJECTED = "faultday_agent_admission_rejected_total"


@dataclass(frozen=True, slots=True)
class Value:
    """One signal's figure and what it was made of, as a reader should see it."""

    value: float
    text: str


@dataclass(frozen=True, slots=True)
class Frame:
    """What the signals of one window read: the run, its series, the window and the baseline."""

    journal: Journal
    series: SeriesSet
    window: JournalWindow
    baseline: JournalWindow | None
    component: str = ""
    logs: tuple[tuple[str, str], ...] = ()  # component → the end of its log
    traces: TracesSummary | None = None  # the run's traces.json

    def log(self) -> str:
        return next((text for name, text in self.logs if name == self.component), "")

    def targets_component(self) -> bool:
        """The window is a fault's, and that fault hit this component."""
        return any(
            f.name == self.window.fault and f.target == self.component for f in self.journal.faults
        )

    def group(self, name: str) -> list[Series]:
        if self.component:
            return en.component_series(self.series, name, self.component)
        return en.named(self.series, name)


def _level(group: Iterable[Series], w: JournalWindow) -> float | None:
    """A gauge's settled level in a baseline: the median of its second half.

    The load starts at t=0 from idle, so the first scrapes of a baseline show a
    GPU still warming up (power, clocks and temperature average over seconds).
    """
    mid = w.start + (w.end - w.start) / 2
    vals = [v for s in group for t, v in zip(s.t, s.v, strict=True) if mid <= t < w.end]
    return statistics.median(vals) if vals else None


def _gauge_ratio(f: Frame, name: str, unit: str, what: str) -> Value | None:
    if f.baseline is None:
        return None
    group = f.group(name)
    now = en.median_in(group, f.window.start, f.window.end)
    base = _level(group, f.baseline)
    if now is None or not base:
        return None
    return Value(now / base, f"{what} {base:.4g} → {now:.4g} {unit} ({name})")


def _rate(f: Frame, name: str, w: JournalWindow) -> float | None:
    grown, n = en.total_increase(f.group(name), w.start, w.end)
    return grown / (w.end - w.start) if n and w.end > w.start else None


def sm_clock_ratio(f: Frame) -> Value | None:
    return _gauge_ratio(f, en.SM_CLOCK, "MHz", "SM clock")


def power_ratio(f: Frame) -> Value | None:
    return _gauge_ratio(f, en.POWER, "W", "power")


def throttle_seconds(f: Frame) -> Value | None:
    parts, total, seen = [], 0.0, False
    for name in en.VIOLATIONS:
        grown, n = en.total_increase(f.group(name), f.window.start, f.window.end)
        seen = seen or n > 0
        if grown > 0:
            total += grown / 1e9
            parts.append(f"{name} +{grown / 1e9:.3g}s")
    if not seen:
        return None
    return Value(total, ", ".join(parts) or "no violation counter rose")


def gpu_temp(f: Frame) -> Value | None:
    top = en.max_in(f.group(en.GPU_TEMP), f.window.start, f.window.end)
    return None if top is None else Value(top, f"{en.GPU_TEMP} max {top:.0f} C")


# The line the NVIDIA kernel driver writes (the simulator writes it into the replica's log).
KERNEL_XID = re.compile(r"NVRM: Xid \(PCI:[^)]*\): (\d+)[^\n]*")


def _kernel_xid(f: Frame) -> Value | None:
    """The Xid from the replica's kernel line, for the window of a fault that hit it."""
    if not f.component or not f.targets_component():
        return None
    found = KERNEL_XID.findall(f.log())
    m = KERNEL_XID.search(f.log())
    if not found or m is None:
        return None
    return Value(
        float(found[-1]),
        f"kernel log: {m.group(0)[:160]} ({XID_NOT_SCRAPED})",
    )


XID_NOT_SCRAPED = f"{en.XID} was not scraped with it before the replica stopped answering"


def xid(f: Frame) -> Value | None:
    """The largest Xid dcgm-exporter reported in the window; else the replica's kernel line."""
    best: tuple[float, str] | None = None
    for s in f.group(en.XID):
        for t, v in zip(s.t, s.v, strict=True):
            if f.window.start <= t < f.window.end and v > 0 and (best is None or v > best[0]):
                best = (v, s.label("err_msg"))
    if best is None:
        from_log = _kernel_xid(f)
        if from_log is not None:
            return from_log
        return None if not f.group(en.XID) else Value(0.0, f"{en.XID} = 0")
    msg = f" ({best[1]})" if best[1] else ""
    return Value(best[0], f"{en.XID} = {best[0]:.0f}{msg}")


def gpu_util(f: Frame) -> Value | None:
    mean = en.mean_in(f.group(en.GPU_UTIL), f.window.start, f.window.end)
    return None if mean is None else Value(mean, f"{en.GPU_UTIL} mean {mean:.0f} %")


def fb_used_share(f: Frame) -> Value | None:
    used = {t: v for s in f.group(en.FB_USED) for t, v in zip(s.t, s.v, strict=True)}
    free = {t: v for s in f.group(en.FB_FREE) for t, v in zip(s.t, s.v, strict=True)}
    shares = [
        (used[t] / (used[t] + free[t]), used[t], free[t])
        for t in used
        if t in free and f.window.start <= t < f.window.end and used[t] + free[t] > 0
    ]
    if not shares:
        return None
    top = max(shares)
    return Value(top[0], f"FB used {top[1]:.0f} MiB, free {top[2]:.0f} MiB ({top[0]:.1%} used)")


def fb_free_ratio(f: Frame) -> Value | None:
    if f.baseline is None:
        return None
    group = f.group(en.FB_FREE)
    low = min(
        (
            v
            for s in group
            for t, v in zip(s.t, s.v, strict=True)
            if f.window.start <= t < f.window.end
        ),
        default=None,
    )
    base = _level(group, f.baseline)
    if low is None or not base:
        return None
    return Value(low / base, f"{en.FB_FREE} {base:.0f} → {low:.0f} MiB")


def pcie_replays(f: Frame) -> Value | None:
    grown, n = en.total_increase(f.group(en.PCIE_REPLAY), f.window.start, f.window.end)
    return Value(grown, f"{en.PCIE_REPLAY} +{grown:.0f}") if n else None


def tokens_per_joule_ratio(f: Frame) -> Value | None:
    if f.baseline is None or not f.component:
        return None
    scale = f.journal.time_scale

    def tpj(w: JournalWindow) -> float | None:
        j = en.joules(f.series, f.component, w.start, w.end, time_scale=scale)
        tokens, n = en.total_increase(f.group(en.GEN_TOKENS), w.start, w.end)
        return tokens / j if n and j else None

    now, base = tpj(f.window), tpj(f.baseline)
    if now is None or not base:
        return None
    return Value(now / base, f"tokens/J {base:.3g} → {now:.3g}")


def token_rate_ratio(f: Frame) -> Value | None:
    if f.baseline is None:
        return None
    now, base = _rate(f, en.GEN_TOKENS, f.window), _rate(f, en.GEN_TOKENS, f.baseline)
    if now is None or not base:
        return None
    return Value(now / base, f"generated tokens {base:.3g}/s → {now:.3g}/s ({en.GEN_TOKENS})")


def prefix_hit_rate_ratio(f: Frame) -> Value | None:
    if f.baseline is None:
        return None

    def rate(w: JournalWindow) -> float | None:
        hits, n = en.total_increase(f.group(en.PREFIX_HITS), w.start, w.end)
        queries, _ = en.total_increase(f.group(en.PREFIX_QUERIES), w.start, w.end)
        return hits / queries if n and queries else None

    now, base = rate(f.window), rate(f.baseline)
    if now is None or not base:
        return None
    return Value(now / base, f"prefix-cache hit rate {base:.1%} → {now:.1%}")


def preemptions(f: Frame) -> Value | None:
    grown, n = en.total_increase(f.group(PREEMPTIONS), f.window.start, f.window.end)
    return Value(grown, f"{PREEMPTIONS} +{grown:.0f}") if n else None


def waiting(f: Frame) -> Value | None:
    mean = en.mean_in(f.group(WAITING), f.window.start, f.window.end)
    return None if mean is None else Value(mean, f"{WAITING} mean {mean:.3g}")


def metrics_up(f: Frame) -> Value | None:
    mean = en.mean_in(f.group(SCRAPE_UP), f.window.start, f.window.end)
    if mean is None:
        return None
    return Value(mean, f"/metrics answered {mean:.0%} of scrapes ({SCRAPE_UP})")


# ---- the whole run --------------------------------------------------------------------


def _load_ratio(f: Frame, name: str, what: str, unit: str) -> Value | None:
    s = f.series.get(name)
    if s is None or f.baseline is None:
        return None
    now = en.mean_in([s], f.window.start, f.window.end)
    base = en.mean_in([s], f.baseline.start, f.baseline.end)
    if now is None or not base:
        return None
    return Value(now / base, f"{what} {base:.3g}{unit} → {now:.3g}{unit}")


def p99_ratio(f: Frame) -> Value | None:
    return _load_ratio(f, "load_e2e_p99", "e2e p99", "s")


def ttft_p99_ratio(f: Frame) -> Value | None:
    return _load_ratio(f, "load_ttft_p99", "TTFT p99", "s")


def throughput_ratio(f: Frame) -> Value | None:
    return _load_ratio(f, "load_tokens_per_s", "client tokens", "/s") or _load_ratio(
        f, "load_rps", "requests", "/s"
    )


def _sum_in(s: Series | None, w: JournalWindow) -> float:
    return sum(v for t, v in zip(s.t, s.v, strict=True) if w.start <= t < w.end) if s else 0.0


def error_rate(f: Frame) -> Value | None:
    n = _sum_in(f.series.get("load_requests"), f.window)
    if not n:
        return None
    e = _sum_in(f.series.get("load_errors"), f.window)
    return Value(e / n, f"{e:.0f} of {n:.0f} requests failed")


def fallback_share(f: Frame) -> Value | None:
    req = f.series.get("load_requests")
    n = _sum_in(req, f.window)
    if req is None or not n:
        return None
    per_t = dict(zip(req.t, req.v, strict=True))
    fell = sum(
        v * per_t.get(t, 0.0)
        for s in f.series.all("load_degraded_share")
        if s.label("reason").startswith("fallback")
        for t, v in zip(s.t, s.v, strict=True)
        if f.window.start <= t < f.window.end
    )
    return Value(fell / n, f"{fell:.0f} of {n:.0f} requests served by a fallback")


def breaker_transitions(f: Frame) -> Value | None:
    grown, n = en.total_increase(f.group(BREAKER_TRANSITIONS), f.window.start, f.window.end)
    if n:
        return Value(grown, f"{BREAKER_TRANSITIONS} +{grown:.0f}")
    events = [
        e
        for e in f.journal.events
        if e.kind.startswith("breaker.") and f.window.start <= e.t < f.window.end
    ]
    return Value(len(events), f"{len(events)} breaker events") if events else None


def retry_amplification(f: Frame) -> Value | None:
    if f.baseline is None:
        return None
    req = f.series.get("load_requests")

    def per_request(w: JournalWindow) -> float | None:
        clients = _sum_in(req, w)
        down = sum(
            en.total_increase(f.group(name), w.start, w.end)[0]
            for name in (PROXY_REQUESTS, PROXY_FAILED_DIALS)
        )
        return down / clients if clients else None

    now, base = per_request(f.window), per_request(f.baseline)
    if now is None or not base:
        return None
    return Value(now / base, f"downstream calls per request {base:.3g} → {now:.3g}")


def tool_queue(f: Frame) -> Value | None:
    top = en.max_in(f.group(TOOL_QUEUE), f.window.start, f.window.end)
    return None if top is None else Value(top, f"{TOOL_QUEUE} max {top:.0f}")


def admission_rejected(f: Frame) -> Value | None:
    grown, n = en.total_increase(f.group(ADMISSION_REJECTED), f.window.start, f.window.end)
    return Value(grown, f"{ADMISSION_REJECTED} +{grown:.0f}") if n else None


# ---- the whole run: its traces ---------------------------------------------------------


def _traced(f: Frame) -> WindowTraces | None:
    wt = tr.window_traces(f.traces, f.window)
    return wt if wt is not None and wt.traced else None


def hop_share_rise(f: Frame) -> Value | None:
    """The mover's share of request time less its share in the baseline (0..1)."""
    wt = _traced(f)
    if wt is None or wt.mover is None:
        return None
    m = wt.mover
    return Value(
        m.share - m.baseline_share,
        f"{m.service}/{m.span} took {tr.pct(m.share)} of request time "
        f"(baseline {tr.pct(m.baseline_share)}), p99 {tr.dur(m.p99_s)} "
        f"(baseline {tr.dur(m.baseline_p99_s)})",
    )


def hop_calls_ratio(f: Frame) -> Value | None:
    """The largest rise in a hop's calls per traced request against the baseline's.

    A hop the baseline calls twice per request by design counts 1.0; one it calls once
    and the window three times, 3.0: the repeats are retries (or a loop that retried).
    Hops the baseline never called (a fallback taking over) are not compared.
    """
    wt, base = _traced(f), tr.baseline_traces(f.traces)
    if wt is None or base is None or not base.traced or wt is base:
        return None
    before = {h.hop: h.count / base.traced for h in base.hops if h.count}
    rises = [
        (h.count / wt.traced / before[h.hop], h.hop, h.count / wt.traced, before[h.hop])
        for h in wt.hops
        if h.hop in before
    ]
    if not rises:
        return None
    ratio, hop, now, then = max(rises)
    return Value(
        ratio,
        f"{hop} called {now:.2g} times per traced request (baseline {then:.2g}), "
        f"over {wt.traced} traced requests",
    )


def hop_retries(f: Frame) -> Value | None:
    """The most retries (spans with ``retry.attempt`` ≥ 2) of one hop per traced request."""
    wt = _traced(f)
    if wt is None or not wt.traced:
        return None
    top = max(wt.hops, key=lambda h: (h.retries, h.hop), default=None)
    if top is None or not top.retries:
        return None
    return Value(
        top.retries / wt.traced,
        f"{top.hop}: {top.retries} retries over {wt.traced} traced requests",
    )


def repeated_spans(f: Frame) -> Value | None:
    """In the window's exemplar requests, the most spans of one hop under one parent."""
    best: tuple[int, str, str] | None = None
    for e in f.traces.exemplars if f.traces else []:
        if e.window != f.window.label:
            continue
        seen: dict[tuple[str, str, str], int] = {}
        for s in e.spans:
            key = (s.parent_id, s.service, s.name)
            seen[key] = seen.get(key, 0) + 1
        for (_, service, name), n in seen.items():
            if best is None or n > best[0]:
                best = (n, f"{service}/{name}", e.trace_id)
    if best is None:
        return None
    n, hop, trace = best
    return Value(n, f"{hop} {n} times under one parent in trace {trace}")


def error_spans(f: Frame) -> Value | None:
    """The spans with error status in the window's failed exemplar; the text names the first."""
    failed = next(
        (
            e
            for e in (f.traces.exemplars if f.traces else [])
            if e.kind == "failed" and e.window == f.window.label
        ),
        None,
    )
    first = tr.first_error(failed.spans) if failed is not None else None
    if failed is None or first is None:
        return None
    bad = sum(1 for s in failed.spans if s.status == SpanStatus.ERROR)
    note = f": {first.note}" if first.note else ""
    return Value(
        bad,
        f"trace {failed.trace_id} (HTTP {failed.status}): the first error was in "
        f"{first.service}/{first.name} at +{tr.dur(first.start_s)} after "
        f"{tr.dur(first.duration_s)}{note}; {bad} spans with error status",
    )


COMPUTE: dict[Signal, Callable[[Frame], Value | None]] = {
    Signal.SM_CLOCK_RATIO: sm_clock_ratio,
    Signal.POWER_RATIO: power_ratio,
    Signal.THROTTLE_SECONDS: throttle_seconds,
    Signal.GPU_TEMP: gpu_temp,
    Signal.XID: xid,
    Signal.GPU_UTIL: gpu_util,
    Signal.FB_USED_SHARE: fb_used_share,
    Signal.FB_FREE_RATIO: fb_free_ratio,
    Signal.PCIE_REPLAYS: pcie_replays,
    Signal.TOKENS_PER_JOULE_RATIO: tokens_per_joule_ratio,
    Signal.TOKEN_RATE_RATIO: token_rate_ratio,
    Signal.PREFIX_HIT_RATE_RATIO: prefix_hit_rate_ratio,
    Signal.PREEMPTIONS: preemptions,
    Signal.WAITING: waiting,
    Signal.METRICS_UP: metrics_up,
    Signal.P99_RATIO: p99_ratio,
    Signal.TTFT_P99_RATIO: ttft_p99_ratio,
    Signal.ERROR_RATE: error_rate,
    Signal.THROUGHPUT_RATIO: throughput_ratio,
    Signal.FALLBACK_SHARE: fallback_share,
    Signal.BREAKER_TRANSITIONS: breaker_transitions,
    Signal.RETRY_AMPLIFICATION: retry_amplification,
    Signal.TOOL_QUEUE: tool_queue,
    Signal.ADMISSION_REJECTED: admission_rejected,
    Signal.HOP_SHARE_RISE: hop_share_rise,
    Signal.HOP_CALLS_RATIO: hop_calls_ratio,
    Signal.REPEATED_SPANS: repeated_spans,
    Signal.HOP_RETRIES: hop_retries,
    Signal.ERROR_SPANS: error_spans,
}


def baseline_of(journal: Journal) -> JournalWindow | None:
    return next((w for w in journal.windows if w.kind == WindowKind.BASELINE), None)
