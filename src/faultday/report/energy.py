"""Tokens per joule, per replica and per window, from the run's scraped series.

Energy is dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (a counter in
mJ); where a GPU exports only ``DCGM_FI_DEV_POWER_USAGE`` the power is integrated
over the scrapes instead. Tokens are vLLM's ``vllm:generation_tokens_total`` on
the same ``/metrics``. Goodput per joule counts only the tokens of requests that
were served ok and undegraded (the load's per-interval shares); the
``tokens_per_joule`` check judges the same figure from every request record,
with the latency SLO too.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faultday.core.journal import Journal, JournalWindow
from faultday.core.vocab import WindowKind
from faultday.report.series import Series, SeriesSet

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot (counter)
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # C
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
XID = "DCGM_FI_DEV_XID_ERRORS"  # the last Xid (gauge)
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
# The clock-event (throttle) counters, in ns of throttled time.
VIOLATIONS = (
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION",
)
GEN_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"  # cached prompt tokens
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # prompt tokens looked up
# The windows an energy table shows, in this order.
SHOWN_KINDS = (WindowKind.BASELINE, WindowKind.FAULT, WindowKind.RECOVERED)


@dataclass(frozen=True, slots=True)
class EnergyRow:
    """One replica (or ``all``) in one window."""

    window: str
    kind: WindowKind
    component: str
    joules: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    tokens: float | None
    tokens_per_joule: float | None
    goodput_per_joule: float | None
    prefix_hit_rate: float | None
    prefill_saved: float | None  # prompt tokens served from the prefix cache
    prefix_queries: float | None = None  # prompt tokens looked up in it


ALL = "all replicas"


def named(series: SeriesSet, name: str) -> list[Series]:
    """A family's series; a counter may come back from the scrape with ``_total`` appended."""
    alias = name if name.endswith("_total") else name + "_total"
    return series.all(name) + (series.all(alias) if alias != name else [])


def component_series(series: SeriesSet, name: str, component: str) -> list[Series]:
    return [s for s in named(series, name) if s.label("component") == component]


def gpu_components(series: SeriesSet) -> list[str]:
    """Components whose /metrics carried a GPU (dcgm-exporter's energy or power)."""
    names = {s.label("component") for n in (ENERGY, POWER) for s in named(series, n)}
    return sorted(n for n in names if n)


def increase(s: Series, start: float, end: float) -> tuple[float, int]:
    """How much a counter grew in [start, end) and the samples used; a drop is a restart.

    The last sample before the window is the starting point, as the checks count it.
    """
    before = [i for i, t in enumerate(s.t) if t < start][-1:]
    inside = [i for i, t in enumerate(s.t) if start <= t < end]
    if not inside:
        return 0.0, 0
    vals = [s.v[i] for i in before + inside]
    grown = sum(b - a if b >= a else b for a, b in itertools.pairwise(vals))
    return grown, len(inside)


def total_increase(group: Iterable[Series], start: float, end: float) -> tuple[float, int]:
    grown, n = 0.0, 0
    for s in group:
        g, k = increase(s, start, end)
        grown, n = grown + g, n + k
    return grown, n


def mean_in(group: Iterable[Series], start: float, end: float) -> float | None:
    vals = [v for s in group for t, v in zip(s.t, s.v, strict=True) if start <= t < end]
    return sum(vals) / len(vals) if vals else None


def median_in(group: Iterable[Series], start: float, end: float) -> float | None:
    """A gauge's typical value in the window (the idle scrapes at a load's start weigh little)."""
    vals = [v for s in group for t, v in zip(s.t, s.v, strict=True) if start <= t < end]
    return statistics.median(vals) if vals else None


def max_in(group: Iterable[Series], start: float, end: float) -> float | None:
    vals = [v for s in group for t, v in zip(s.t, s.v, strict=True) if start <= t < end]
    return max(vals) if vals else None


def joules(
    series: SeriesSet, component: str, start: float, end: float, *, time_scale: float = 1.0
) -> float | None:
    """Energy of one GPU in the window: the energy counter, else power integrated.

    The counter counts real joules; scrape times are scenario seconds, so integrated
    power is scaled by the run's time scale to stay in the same unit.
    """
    energy, n = total_increase(component_series(series, ENERGY, component), start, end)
    if n >= 1:
        return energy / 1e3
    power = component_series(series, POWER, component)
    if not power:
        return None
    total = 0.0
    for s in power:
        pts = [(t, v) for t, v in zip(s.t, s.v, strict=True) if start <= t < end]
        # Trapezoids between scrapes; a gap while the replica was down counts as no power.
        total += sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(pts))
    return total * time_scale


def good_share(series: SeriesSet, start: float, end: float) -> float | None:
    """Share of the window's tokens that belong to requests served ok and undegraded.

    Per interval: undegraded answers ÷ answers (a failed request carries no tokens),
    weighted by the interval's tokens.
    """
    tok, req = series.get("load_tokens_per_s"), series.get("load_requests")
    if tok is None or req is None:
        return None
    err, deg = series.get("load_errors"), series.get("load_degraded_share")
    n = dict(zip(req.t, req.v, strict=True))
    errs = dict(zip(err.t, err.v, strict=True)) if err else {}
    degs = dict(zip(deg.t, deg.v, strict=True)) if deg else {}
    all_tok = good = 0.0
    for t, v in zip(tok.t, tok.v, strict=True):
        answered = n.get(t, 0.0) - errs.get(t, 0.0)
        if start <= t < end and answered > 0:
            undegraded = max(0.0, answered - degs.get(t, 0.0) * n.get(t, 0.0))
            all_tok += v
            good += v * undegraded / answered
    return good / all_tok if all_tok else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _row(
    series: SeriesSet, w: JournalWindow, component: str, *, share: float | None, scale: float
) -> EnergyRow:
    j = joules(series, component, w.start, w.end, time_scale=scale)
    tokens, n = total_increase(component_series(series, GEN_TOKENS, component), w.start, w.end)
    hits, nh = total_increase(component_series(series, PREFIX_HITS, component), w.start, w.end)
    queries, _ = total_increase(component_series(series, PREFIX_QUERIES, component), w.start, w.end)
    tpj = _ratio(tokens, j) if n else None
    return EnergyRow(
        window=w.label,
        kind=w.kind,
        component=component,
        joules=j,
        power_w=median_in(component_series(series, POWER, component), w.start, w.end),
        sm_clock_mhz=median_in(component_series(series, SM_CLOCK, component), w.start, w.end),
        tokens=tokens if n else None,
        tokens_per_joule=tpj,
        goodput_per_joule=tpj * share if tpj is not None and share is not None else None,
        prefix_hit_rate=_ratio(hits, queries) if nh else None,
        prefill_saved=hits if nh else None,
        prefix_queries=queries if nh else None,
    )


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _all_row(rows: Sequence[EnergyRow], share: float | None) -> EnergyRow:
    j, tokens = _sum([r.joules for r in rows]), _sum([r.tokens for r in rows])
    tpj = _ratio(tokens, j)
    saved, queries = _sum([r.prefill_saved for r in rows]), _sum([r.prefix_queries for r in rows])
    return EnergyRow(
        window=rows[0].window,
        kind=rows[0].kind,
        component=ALL,
        joules=j,
        power_w=_sum([r.power_w for r in rows]),
        sm_clock_mhz=None,
        tokens=tokens,
        tokens_per_joule=tpj,
        goodput_per_joule=tpj * share if tpj is not None and share is not None else None,
        prefix_hit_rate=_ratio(saved, queries),
        prefill_saved=saved,
        prefix_queries=queries,
    )


def shown_windows(journal: Journal) -> list[JournalWindow]:
    """Baseline, each fault, after recovery (a run without faults: the whole run)."""
    out = [w for k in SHOWN_KINDS for w in journal.windows if w.kind == k]
    if not out:
        out = [w for w in journal.windows if w.kind == WindowKind.RUN]
    return out


def energy_rows(journal: Journal, series: SeriesSet) -> list[EnergyRow]:
    """Per window: one row per GPU-carrying replica, then their sum; empty without DCGM data."""
    comps = gpu_components(series)
    if not comps:
        return []
    rows: list[EnergyRow] = []
    for w in shown_windows(journal):
        share = good_share(series, w.start, w.end)
        mine = [_row(series, w, c, share=share, scale=journal.time_scale) for c in comps]
        rows += mine
        if len(mine) > 1:
            rows.append(_all_row(mine, share))
    return rows


def overall(rows: Sequence[EnergyRow], kind: WindowKind, label: str = "") -> EnergyRow | None:
    """The figure over every replica in one window (the first of its kind unless ``label``)."""
    of_kind = [r for r in rows if r.kind == kind]
    label = label or (of_kind[0].window if of_kind else "")
    mine = [r for r in of_kind if r.window == label]
    summed = [r for r in mine if r.component == ALL]
    if summed:
        return summed[0]
    return mine[0] if len(mine) == 1 else None
