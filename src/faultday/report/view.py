"""What a report shows, derived from the journal (and the run's ``timeseries.csv`` when present).

Everything here is plain data; templates only lay it out. Text that came from
the system under test (model answers, log lines, error messages) stays text:
the HTML template escapes it, the Markdown template too (``faultday.report.markdown``).
The one exception is a runbook excerpt's section bodies, which are Markdown.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from faultday.core.journal import Journal, JournalCheck, JournalEvent, RunVerdict
from faultday.core.records import ANSWERS_NAME, AnswerLabel, AnswerSample
from faultday.core.vocab import WindowKind
from faultday.report import markdown
from faultday.report import runbooks as rb
from faultday.report.diagnosis import Diagnosis, diagnose
from faultday.report.energy import EnergyRow, energy_rows
from faultday.report.series import SeriesSet, read_series
from faultday.report.tracing import TimeSpent, load_traces, time_spent

log = logging.getLogger(__name__)

TIMELINE_LIMIT = 300  # rows; a breaker that flaps for an hour must not make a 10 MB report
ANSWER_ROWS = 5  # sampled answers shown per window, unless spec.load.answers.rows says
ANSWER_ROWS_MAX = 100
ANSWERS_MAX_BYTES = 32 << 20  # answers.jsonl read at most this far (the load bounds it anyway)
# Event kinds that belong in the timeline even when they are many; the rest is noise there.
_QUIET_KINDS = frozenset({"timeseries.written", "scrape.none"})
_PATH_PREFIXES = ("breaker", "fallback", "task.resume", "resume", "retry", "restart", "component")


@dataclass(frozen=True, slots=True)
class Impact:
    requests: int | None = None
    errors: int | None = None
    degraded: int | None = None
    affected: int | None = None
    slo_error_rate: float | None = None
    budget_burned: float | None = None  # errors ÷ (SLO error rate × requests); 1.0 = all of it
    goodput_lost: float | None = None  # requests that would have succeeded undegraded at baseline
    goodput_lost_share: float | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class TimelineRow:
    t: float
    kind: str
    css: str
    what: str
    fault: str
    target: str
    details: str


@dataclass(frozen=True, slots=True)
class CheckRow:
    section: str
    window: str
    label: str
    check: str
    expected: str
    observed: str
    verdict: str
    n: int
    message: str


@dataclass(frozen=True, slots=True)
class PathRow:
    what: str
    count: int
    detail: str


@dataclass(frozen=True, slots=True)
class FaultRow:
    name: str
    inject: str
    target: str
    planned: str
    injected_at: str
    reverted_at: str
    revert: str
    error: str


@dataclass(frozen=True, slots=True)
class Chart:
    name: str
    title: str
    svg: str  # produced by matplotlib here, never from journal text


@dataclass(frozen=True, slots=True)
class RunbookExcerpt:
    name: str
    sections: tuple[tuple[str, str], ...]  # heading, Markdown body


@dataclass(frozen=True, slots=True)
class DiagnosisRow:
    """A diagnosis as a report shows it, with where its runbook is."""

    d: Diagnosis
    runbook_href: str  # "#runbook" when it is this report's own runbook excerpt


@dataclass(frozen=True, slots=True)
class AnswerTable:
    """A window's sampled answers as the report shows them: at most ``rows`` of ``kept``."""

    window: str
    kept: int
    rows: tuple[AnswerSample, ...]


@dataclass(frozen=True, slots=True)
class ReportView:
    journal: Journal
    name: str
    title: str
    verdict: str
    reason: str
    severity: str
    started: str
    ended: str
    wall_seconds: float | None
    passed: int
    total: int
    impact: Impact
    faults: tuple[FaultRow, ...]
    timeline: tuple[TimelineRow, ...]
    timeline_dropped: int
    checks: tuple[CheckRow, ...]
    not_evaluated: tuple[str, ...]
    paths: tuple[PathRow, ...]
    actions: tuple[str, ...]
    runbook: RunbookExcerpt | None
    errors: tuple[str, ...]
    components: tuple[tuple[str, str], ...]
    scenario_yaml: str
    stack_yaml: str
    charts: tuple[Chart, ...] = ()
    chart_note: str = ""
    answers: tuple[tuple[float, str, str], ...] = field(default=())  # t, where, text
    sampled_answers: tuple[AnswerTable, ...] = ()
    answers_note: str = ""
    energy: tuple[EnergyRow, ...] = ()
    diagnoses: tuple[DiagnosisRow, ...] = ()
    time_spent: TimeSpent = field(default_factory=TimeSpent)
    time_chart: Chart | None = None


def scenario_name(journal: Journal) -> str:
    meta = journal.scenario.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return str(meta["name"])
    return journal.run_id


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _css(kind: str) -> str:
    if kind.startswith("fault.inject"):
        return "fault"
    if kind.startswith("fault.revert") or kind == "reverts.done":
        return "revert"
    if kind in ("abort", "error") or kind.endswith("failed"):
        return "bad"
    if kind.startswith(_PATH_PREFIXES):
        return "path"
    return "info"


def _details(ev: JournalEvent) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(ev.data.items()) if k not in ("answer", "text"))


def _timeline(journal: Journal) -> tuple[list[TimelineRow], int]:
    events = [e for e in journal.events if e.kind not in _QUIET_KINDS]
    # Keep every fault/abort/error row; thin out the rest first when over the limit.
    important = [e for e in events if _css(e.kind) in ("fault", "revert", "bad")]
    rest = [e for e in events if _css(e.kind) not in ("fault", "revert", "bad")]
    room = max(0, TIMELINE_LIMIT - len(important))
    kept = sorted(important + rest[:room], key=lambda e: (e.t, e.wall))
    rows = [
        TimelineRow(
            t=e.t,
            kind=e.kind,
            css=_css(e.kind),
            what=e.message,
            fault=e.fault or "",
            target=e.target or "",
            details=_details(e),
        )
        for e in kept
    ]
    return rows, len(events) - len(kept)


def _checks(journal: Journal) -> list[CheckRow]:
    return [
        CheckRow(
            c.section, c.window, c.label, c.check, c.expected, c.observed, c.verdict, c.n, c.message
        )
        for c in journal.checks
    ]


def _spec_labels(journal: Journal) -> list[tuple[str, str]]:
    """(section, label) of every check the scenario declares (steady_state, expect)."""
    spec = journal.scenario.get("spec")
    out: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        return out
    for section in ("steady_state", "expect"):
        items = spec.get(section)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict):
                out.append((section, _label(item)))
    return out


def _label(item: Mapping[str, object]) -> str:
    if item.get("name"):
        return str(item["name"])
    check = str(item.get("check", "?"))
    if item.get("during"):
        return f"during {item['during']}: {check}"
    if item.get("after"):
        return f"after {item['after']}: {check}"
    return check


def not_evaluated(journal: Journal) -> list[str]:
    """Declared checks the run never judged (it aborted or errored first)."""
    if journal.verdict not in (RunVerdict.ABORTED, RunVerdict.ERROR, RunVerdict.RUNNING):
        return []
    judged = {(c.section, c.label) for c in journal.checks}
    return [f"{s}: {lab}" for s, lab in _spec_labels(journal) if (s, lab) not in judged]


def _slo(journal: Journal) -> float | None:
    spec = journal.scenario.get("spec")
    items = spec.get("steady_state") if isinstance(spec, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("check") == "error_rate":
            params = item.get("params")
            value = (params if isinstance(params, dict) else item).get("max")
            if isinstance(value, int | float) and value > 0:
                return float(value)
    return None


def _fault_spans(journal: Journal) -> list[tuple[float, float]]:
    spans = []
    for f in journal.faults:
        start = f.injected_at if f.injected_at is not None else None
        if start is None:
            continue
        end = f.reverted_at if f.reverted_at is not None else start + (f.duration or 0.0)
        spans.append((start, end))
    if not spans:
        spans = [(w.start, w.end) for w in journal.windows if w.kind == "fault"]
    return spans


def impact(journal: Journal, series: SeriesSet) -> Impact:
    """Requests affected, error budget burned and goodput lost, from the per-interval series."""
    req, err = series.get("load_requests"), series.get("load_errors")
    slo = _slo(journal)
    if req is None or err is None:
        return Impact(slo_error_rate=slo, note="no load data in this run (no timeseries.csv)")
    deg = series.get("load_degraded_share")
    n = round(sum(req.v))
    e = round(sum(err.v))
    degraded = (
        round(sum(s * r for s, r in zip(deg.v, req.v, strict=False))) if deg is not None else 0
    )
    affected = e + degraded  # an errored request is not also counted as degraded by the load
    burned = e / (slo * n) if slo and n else None
    good = [
        max(0.0, r - x - (d * r if deg is not None else 0.0))
        for r, x, d in zip(
            req.v, err.v, deg.v if deg is not None else [0.0] * len(req.v), strict=False
        )
    ]
    spans = _fault_spans(journal)
    interval = series.interval()
    base = [
        g for t, g in zip(req.t, good, strict=False) if t >= 0 and t + interval <= _first(spans)
    ]
    if not base or not spans:
        return Impact(
            n,
            e,
            degraded,
            affected,
            slo,
            burned,
            note="no baseline before the first fault: goodput loss not computed",
        )
    rate = sum(base) / len(base)
    lost = sum(
        max(0.0, rate - g)
        for t, g in zip(req.t, good, strict=False)
        if any(a - interval < t < b for a, b in spans)
    )
    in_faults = sum(1 for t in req.t if any(a - interval < t < b for a, b in spans))
    share = lost / (rate * in_faults) if rate and in_faults else None
    return Impact(n, e, degraded, affected, slo, burned, lost, share)


def _first(spans: list[tuple[float, float]]) -> float:
    return min((a for a, _ in spans), default=math.inf)


def degradation_paths(journal: Journal, series: SeriesSet) -> list[PathRow]:
    """Fallback hops, breaker transitions, restarts and resumed tasks that actually happened."""
    counts: Counter[tuple[str, str]] = Counter()
    for ev in journal.events:
        if ev.kind.startswith(_PATH_PREFIXES):
            counts[(ev.kind, ev.target or ev.fault or "")] += 1
    rows = [
        PathRow(f"{kind} {target}".strip(), n, _path_detail(journal, kind, target))
        for (kind, target), n in sorted(counts.items())
    ]
    req = series.get("load_requests")
    for s in series.all("load_degraded_share"):
        reason = s.label("reason")
        if not reason or req is None:
            continue
        n = round(sum(v * r for v, r in zip(s.v, req.v, strict=False)))
        if n:
            rows.append(
                PathRow(f"degraded: {reason}", n, "responses served degraded for this reason")
            )
    return rows


def _path_detail(journal: Journal, kind: str, target: str) -> str:
    times = [
        e.t for e in journal.events if e.kind == kind and (e.target or e.fault or "") == target
    ]
    shown = ", ".join(f"t={t:.1f}s" for t in times[:6])
    return shown + (f" … (+{len(times) - 6})" if len(times) > 6 else "")


_ADVICE = {
    "retry_amplification": "{observed} downstream amplification{where}: add exponential backoff "
    "with jitter, a retry budget, and a circuit breaker on this edge",
    "error_rate": "error rate {observed}{where} (budget {expected}): add or fix the fallback "
    "path and shed load before the dependency fails",
    "latency": "latency {observed}{where} (budget {expected}): tighten the timeout, hedge or "
    "fail over sooner",
    "fallback_rate": "only {observed} of requests fell back{where} (wanted {expected}): check "
    "that the breaker opens and that the backup route is configured",
    "recovery_time": "recovery took {observed}{where} (budget {expected}): shorten restart "
    "backoff and readiness checks; check that breakers close again",
    "breaker": "breaker did not behave as designed{where} ({observed}; wanted {expected}): "
    "review threshold and reset_after",
    "tasks_lost": "{observed} tasks lost{where}: checkpoint task state before every tool call "
    "and resume on start",
    "duplicate_side_effects": "{observed} duplicate side effects{where}: make tool writes "
    "idempotent (idempotency keys on the outbox)",
    "recall": "retrieval recall {observed}{where} (wanted {expected}): alert on recall, keep "
    "a known-good index alias to roll back to",
    "health": "{label}{where}: expected {expected}, observed {observed} — check readiness "
    "and restart policy",
    "throughput": "throughput {observed}{where} (wanted {expected}): add capacity or admission "
    "control",
    "goodput": "goodput {observed}{where} (wanted {expected}): shed or degrade earlier so "
    "requests that are served meet the SLO",
}


def _target_of(c: JournalCheck) -> str:
    for key in ("target", "edge", "dependency"):
        v = c.params.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def action_items(journal: Journal) -> list[str]:
    """One concrete follow-up per failed check, abort, failed revert and harness error."""
    items: list[str] = []
    for c in journal.checks:
        if c.verdict == "passed":
            continue
        target = _target_of(c)
        where = f" on {target}" if target else ""
        where += f" ({c.window})" if c.window else ""
        if c.verdict == "error":
            items.append(
                f"{c.label}: the check could not be evaluated ({c.message or 'error'}) — "
                "fix the check or the data it needs"
            )
            continue
        template = _ADVICE.get(
            c.check,
            "{label}{where}: expected {expected}, observed {observed} "
            "— investigate and add a regression scenario",
        )
        items.append(
            template.format(
                observed=c.observed or "?",
                expected=c.expected or "?",
                where=where,
                label=c.label,
            )
            + (f" [{c.section}]" if c.section == "abort" else "")
        )
    for f in journal.faults:
        if f.revert_ok is False:
            items.append(
                f"revert of fault {f.name} ({f.inject} on {f.target}) failed: {f.error} — "
                "run `faultday recover` and fix the injector's revert"
            )
    if journal.verdict == RunVerdict.ABORTED:
        items.append(
            f"the run was aborted ({journal.reason}): the steady state was lost badly "
            "enough to trip a safety limit; treat the degradation path as missing"
        )
    for e in journal.errors:
        items.append(f"harness/stack error: {e}")
    return items


def answers(journal: Journal) -> list[tuple[float, str, str]]:
    """Model answers and log lines the journal quoted (events with ``answer`` or ``text`` data)."""
    out = []
    for ev in journal.events:
        for key in ("answer", "text", "line"):
            v = ev.data.get(key)
            if isinstance(v, str) and v:
                out.append((ev.t, f"{ev.kind} {ev.target or ''}".strip(), v))
    return out[:50]


def answer_rows(journal: Journal) -> int:
    """Rows per window of the sampled-answers table: ``spec.load.answers.rows``, else 5."""
    spec = journal.scenario.get("spec")
    load = spec.get("load") if isinstance(spec, dict) else None
    conf = load.get("answers") if isinstance(load, dict) else None
    rows = conf.get("rows") if isinstance(conf, dict) else None
    if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0:
        return min(rows, ANSWER_ROWS_MAX)
    return ANSWER_ROWS


def read_answers(run_dir: Path) -> tuple[list[AnswerSample], str]:
    """The run's sampled answers (``answers.jsonl``) and a note on what could not be read."""
    path = run_dir / ANSWERS_NAME
    try:
        with path.open("rb") as fh:
            raw = fh.read(ANSWERS_MAX_BYTES + 1)
    except FileNotFoundError:
        return [], ""
    except OSError as exc:
        return [], f"{ANSWERS_NAME} could not be read: {exc}"
    cut = len(raw) > ANSWERS_MAX_BYTES
    out: list[AnswerSample] = []
    bad = 0
    for line in raw[:ANSWERS_MAX_BYTES].decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            out.append(AnswerSample.from_json(json.loads(line)))
        except (ValueError, TypeError):
            bad += 1
    notes = [f"{bad} unreadable lines in {ANSWERS_NAME}"] if bad else []
    if cut:
        notes.append(f"{ANSWERS_NAME} is over {ANSWERS_MAX_BYTES >> 20} MiB; the rest is not shown")
    return out, "; ".join(notes)


_LABEL_ORDER = {str(label): i for i, label in enumerate(AnswerLabel)}


def _pick(samples: list[AnswerSample], rows: int) -> list[AnswerSample]:
    """Up to ``rows`` samples, every label shown before any shows twice (worst labels first),
    each label's picks spread over the window; in time order."""
    by_label: dict[str, list[AnswerSample]] = {}
    for s in samples:
        by_label.setdefault(s.label, []).append(s)
    order = sorted(by_label, key=lambda k: (_LABEL_ORDER.get(k, len(_LABEL_ORDER)), k))
    quota = dict.fromkeys(order, 0)
    left = min(rows, len(samples))
    while left:
        for k in order:
            if left and quota[k] < len(by_label[k]):
                quota[k] += 1
                left -= 1
    picked = []
    for k in order:
        group, n = by_label[k], quota[k]
        picked += [group[i * len(group) // n] for i in range(n)] if n else []
    return sorted(picked, key=lambda s: (s.t, s.key))


def answer_tables(journal: Journal, samples: list[AnswerSample]) -> list[AnswerTable]:
    """The sampled answers of each window that does not overlap another: the baseline, each
    fault, the recovered end (or the whole run when it has no faults)."""
    rows = answer_rows(journal)
    if not samples or not rows:
        return []
    shown = (WindowKind.BASELINE, WindowKind.FAULT, WindowKind.RECOVERED)
    windows = [w for w in journal.windows if w.kind in shown] or [
        w for w in journal.windows if w.kind == WindowKind.RUN
    ]
    tables = []
    for w in sorted(windows, key=lambda w: (w.start, w.end)):
        inside = [s for s in samples if w.start <= s.t < w.end]
        if inside:
            tables.append(AnswerTable(w.label, len(inside), tuple(_pick(inside, rows))))
    return tables


def runbook_excerpt(journal: Journal, *, base_dir: Path) -> RunbookExcerpt | None:
    """The runbook sections that apply (first checks, actions, verify) for the run's stack."""
    if not journal.runbook:
        return None
    rdir = rb.find_runbook_dir(base_dir)
    if rdir is None:
        return RunbookExcerpt(journal.runbook, (("Note", "runbook templates not found"),))
    try:
        facts = rb.facts_from_journal(journal, base_dir=base_dir)
        text = rb.render_runbook(journal.runbook, facts=facts, runbook_dir=rdir)
    except rb.RunbookError as exc:
        log.warning("%s", exc)
        # The message quotes the journal's runbook name: text, not Markdown.
        return RunbookExcerpt(journal.runbook, (("Note", markdown.inline(exc)),))
    secs = rb.sections(text)
    want = ("First checks", "Switching traffic", "Actions", "Verify recovery")
    return RunbookExcerpt(journal.runbook, tuple((h, secs[h]) for h in want if h in secs))


def _faults(journal: Journal) -> list[FaultRow]:
    def t(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}s"

    rows = []
    for f in journal.faults:
        planned = f"at {f.at:g}s" + (f" for {f.duration:g}s" if f.duration else " (one-shot)")
        revert = {True: "ok", False: "FAILED", None: "—"}[f.revert_ok]
        rows.append(
            FaultRow(
                f.name,
                f.inject,
                f.target,
                planned,
                t(f.injected_at),
                t(f.reverted_at),
                revert,
                f.error,
            )
        )
    return rows


def diagnosis_rows(
    journal: Journal, series: SeriesSet, run_dir: Path, *, base_dir: Path
) -> list[DiagnosisRow]:
    """The rules that fired, each with a link to its runbook (this report's, or the template)."""
    rdir = rb.find_runbook_dir(base_dir)
    rows = []
    for d in diagnose(journal, series, run_dir):
        href = "#runbook" if d.runbook == journal.runbook else ""
        if not href and rdir is not None:
            template = rdir / f"{d.runbook}{rb.RUNBOOK_SUFFIX}"
            href = os.path.relpath(template, run_dir) if template.is_file() else ""
        rows.append(DiagnosisRow(d, href))
    return rows


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def build_view(
    journal: Journal, run_dir: Path, *, base_dir: Path | None = None, charts: bool = True
) -> ReportView:
    """Everything a report shows; ``charts=False`` skips matplotlib (Markdown without images)."""
    series = read_series(run_dir)
    timeline, dropped = _timeline(journal)
    wall = journal.ended - journal.started if journal.ended and journal.started else None
    made: list[Chart] = []
    note = ""
    traces, traces_problem = load_traces(run_dir)
    spent = time_spent(traces, problem=traces_problem)
    time_chart = None
    if charts:
        # Start-up time: matplotlib (~0.5 s) only when charts are drawn (JUnit needs none).
        from faultday.report.charts import make_charts  # noqa: PLC0415

        made = make_charts(journal, series)
        if spent.bars:
            from faultday.report.charts import time_share_chart  # noqa: PLC0415 - as above

            time_chart = time_share_chart(journal, spent.bars)
        if not series:
            note = (
                "No time series in this run folder (timeseries.csv); "
                "only the fault timeline is drawn."
            )
    stack_yaml = yaml.safe_dump(journal.stack, sort_keys=False) if journal.stack else ""
    base = base_dir or Path.cwd()
    sampled, answers_note = read_answers(run_dir)
    return ReportView(
        journal=journal,
        name=scenario_name(journal),
        title=journal.title or scenario_name(journal),
        verdict=str(journal.verdict),
        reason=_ANSI.sub("", journal.reason),
        severity=journal.severity or "—",
        started=_when(journal.started),
        ended=_when(journal.ended),
        wall_seconds=wall,
        passed=sum(1 for c in journal.checks if c.verdict == "passed"),
        total=len(journal.checks),
        impact=impact(journal, series),
        faults=tuple(_faults(journal)),
        timeline=tuple(timeline),
        timeline_dropped=dropped,
        checks=tuple(_checks(journal)),
        not_evaluated=tuple(not_evaluated(journal)),
        paths=tuple(degradation_paths(journal, series)),
        actions=tuple(action_items(journal)),
        runbook=runbook_excerpt(journal, base_dir=base),
        errors=tuple(journal.errors),
        components=tuple(sorted(journal.components.items())),
        scenario_yaml=yaml.safe_dump(journal.scenario, sort_keys=False),
        stack_yaml=stack_yaml,
        charts=tuple(made),
        chart_note=note,
        answers=tuple(answers(journal)),
        sampled_answers=tuple(answer_tables(journal, sampled)),
        answers_note=answers_note,
        energy=tuple(energy_rows(journal, series)),
        diagnoses=tuple(diagnosis_rows(journal, series, run_dir, base_dir=base)),
        time_spent=spent,
        time_chart=time_chart,
    )
