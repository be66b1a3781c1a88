"""Diagnosis: what a run looked like → likely causes → what to check, from its own evidence.

The rules are data (``diagnosis.yaml`` next to this module, validated by
:class:`RuleBook` with file:line:col errors). Each rule names the signals it
needs (``faultday.report.signals``) with thresholds, journal checks or text it
needs, and the commands to run per stack. A rule fires for a window (each
fault, or the whole run) and, when its scope is ``replica``, for one GPU
replica at a time; every diagnosis carries the values it fired on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from faultday.core.journal import Journal, JournalWindow
from faultday.core.traces import TracesSummary
from faultday.core.vocab import WindowKind
from faultday.core.yamlpos import parse_text, validation_problems
from faultday.errors import ScenarioError
from faultday.report import energy as en
from faultday.report import signals as sg
from faultday.report.series import SeriesSet
from faultday.report.tracing import load_traces

RULES_FILE = Path(__file__).with_name("diagnosis.yaml")
# Of each component log: a run's logs are small; a long one keeps its end, where a failure is.
LOG_TAIL_BYTES = 1024 * 1024
Stack = Literal["local", "docker", "k8s"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_M):
    """One piece of evidence: a signal against a threshold, a journal check, or text."""

    signal: sg.Signal | None = None
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    eq: float | None = None
    check: str | None = Field(default=None, description="a journal check in the window")
    verdict: str = Field(default="failed", description="with check: the verdict it must have")
    text: str | None = Field(
        default=None, description="regex over the journal's errors and/or the component logs"
    )
    where: Literal["journal", "logs", "both"] = Field(
        default="both", description="with text: what to search"
    )

    @field_validator("text")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from exc
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Condition:
        kinds = [k for k in (self.signal, self.check, self.text) if k is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of signal, check or text")
        ops = [o for o in (self.lt, self.le, self.gt, self.ge, self.eq) if o is not None]
        if self.signal is not None and len(ops) != 1:
            raise ValueError("a signal needs exactly one of lt, le, gt, ge, eq")
        if self.signal is None and ops:
            raise ValueError("lt/le/gt/ge/eq go with a signal")
        return self

    def holds(self, value: float) -> bool:
        return (
            (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
            and (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.eq is None or value == self.eq)
        )

    def threshold(self) -> str:
        for op, sym in (("lt", "<"), ("le", "≤"), ("gt", ">"), ("ge", "≥"), ("eq", "=")):
            v = getattr(self, op)
            if v is not None:
                return f"{sym} {v:g}"
        return ""


class CheckStep(_M):
    """What to check, with the command for each kind of stack."""

    what: str
    local: str
    docker: str
    k8s: str


class Rule(_M):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    symptom: str
    cause: str
    runbook: str
    scope: sg.Scope = sg.Scope.RUN
    windows: Literal["faults", "run"] = "faults"
    all: tuple[Condition, ...] = Field(default=(), description="every one must hold")
    any: tuple[Condition, ...] = Field(default=(), description="and at least one of these")
    show: tuple[sg.Signal, ...] = Field(
        default=(), description="more figures to quote when the rule fires (not conditions)"
    )
    checks: tuple[CheckStep, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _scope(self) -> Rule:
        if not self.all and not self.any:
            raise ValueError("give at least one condition (all or any)")
        used = [c.signal for c in (*self.all, *self.any)] + list(self.show)
        wanted = {s for s in used if s in sg.REPLICA_SIGNALS}
        if wanted and self.scope != sg.Scope.REPLICA:
            names = ", ".join(sorted(str(s) for s in wanted))
            raise ValueError(f"signals of one replica ({names}) need scope: replica")
        return self


class RuleBook(_M):
    version: Literal[1] = 1
    rules: tuple[Rule, ...]

    @model_validator(mode="after")
    def _unique(self) -> RuleBook:
        ids = [r.id for r in self.rules]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"rule ids appear twice: {', '.join(dup)}")
        return self


def parse_rules(text: str, *, file: str) -> RuleBook:
    """A rule file → RuleBook; every problem at once, each with file:line:col."""
    doc = parse_text(text, file=file)
    try:
        return RuleBook.model_validate(doc.data)
    except ValidationError as exc:
        raise ScenarioError(validation_problems(doc, exc, model=RuleBook)) from None


@cache
def default_rules() -> RuleBook:
    return parse_rules(RULES_FILE.read_text(encoding="utf-8"), file=str(RULES_FILE))


# ---- evaluation -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One rule that fired: where, on what values, and what to check."""

    rule: str
    symptom: str
    cause: str
    runbook: str
    window: str
    component: str
    evidence: tuple[str, ...]
    checks: tuple[tuple[str, str], ...]  # what, command for the run's stack


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the rules read of one run."""

    journal: Journal
    series: SeriesSet
    journal_texts: tuple[str, ...]
    logs: tuple[tuple[str, str], ...]  # component → the end of its log
    traces: TracesSummary | None = None  # traces.json; the trace signals are None without it

    def texts(self, where: str) -> tuple[str, ...]:
        logs = tuple(text for _, text in self.logs)
        return {
            "journal": self.journal_texts,
            "logs": logs,
            "both": self.journal_texts + logs,
        }[where]

    def frame(self, w: JournalWindow, component: str = "") -> sg.Frame:
        base = sg.baseline_of(self.journal)
        return sg.Frame(self.journal, self.series, w, base, component, self.logs, self.traces)


def journal_texts(journal: Journal) -> tuple[str, ...]:
    """The journal's errors and failure messages."""
    out = [journal.reason, *journal.errors]
    out += [
        e.message for e in journal.events if e.kind in ("error", "abort", "fault.inject_failed")
    ]
    return tuple(t for t in out if t)


def log_texts(run_dir: Path) -> tuple[tuple[str, str], ...]:
    """The end of each component log in the run folder, by component (the file's stem)."""
    out = []
    logs = run_dir / "logs"
    for path in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        with path.open("rb") as fh:
            size = path.stat().st_size
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            text = fh.read().decode("utf-8", "replace")
        if text:
            out.append((path.stem, text))
    return tuple(out)


def _condition(ev: Evidence, c: Condition, frame: sg.Frame) -> str | None:
    """The evidence line when the condition holds, else None."""
    if c.signal is not None:
        scoped = frame if c.signal in sg.REPLICA_SIGNALS else ev.frame(frame.window)
        got = sg.COMPUTE[c.signal](scoped)
        if got is None or not c.holds(got.value):
            return None
        return f"{c.signal} = {got.value:.4g} ({c.threshold()}): {got.text}"
    if c.check is not None:
        for j in ev.journal.checks:
            if j.check == c.check and j.verdict == c.verdict and _same_window(j.window, frame):
                seen, wanted = j.observed or "—", j.expected or "—"
                return f"check {j.label} {j.verdict}: observed {seen}, expected {wanted}"
        return None
    assert c.text is not None
    pattern = re.compile(c.text)
    for t in ev.texts(c.where):
        m = pattern.search(t)
        if m:
            line_start = t.rfind("\n", 0, m.start()) + 1
            line_end = t.find("\n", m.end())
            line = t[line_start : line_end if line_end >= 0 else len(t)].strip()
            return f"text /{c.text}/: {line[:200]}"
    return None


def _same_window(label: str, frame: sg.Frame) -> bool:
    w = frame.window
    return w.kind == WindowKind.RUN or label == w.label or bool(w.fault and w.fault in label)


def _fires(ev: Evidence, rule: Rule, frame: sg.Frame) -> list[str] | None:
    lines = []
    for c in rule.all:
        got = _condition(ev, c, frame)
        if got is None:
            return None
        lines.append(got)
    if rule.any:
        some = [g for c in rule.any if (g := _condition(ev, c, frame)) is not None]
        if not some:
            return None
        lines += some
    for signal in rule.show:
        scoped = frame if signal in sg.REPLICA_SIGNALS else ev.frame(frame.window)
        shown = sg.COMPUTE[signal](scoped)
        if shown is not None:
            lines.append(f"{signal} = {shown.value:.4g}: {shown.text}")
    return lines


def _windows(journal: Journal, rule: Rule) -> list[JournalWindow]:
    faults = [w for w in journal.windows if w.kind == WindowKind.FAULT]
    run = [w for w in journal.windows if w.kind == WindowKind.RUN]
    if rule.windows == "run" or not faults:
        return run or [JournalWindow(kind=WindowKind.RUN, label="whole run", start=-1e9, end=1e9)]
    return faults


def stack_kind(journal: Journal) -> Stack:
    driver = str(journal.stack.get("driver") or "")
    if driver in ("kubernetes", "k8s"):
        return "k8s"
    return "docker" if driver == "docker" else "local"


def diagnose(
    journal: Journal, series: SeriesSet, run_dir: Path, *, rules: RuleBook | None = None
) -> list[Diagnosis]:
    """Every rule that fires on this run, in the rule file's order."""
    book = rules or default_rules()
    # An unreadable traces.json is said in the report's "Where the time went"; here it
    # only means the trace signals have no data.
    traces, _ = load_traces(run_dir)
    ev = Evidence(journal, series, journal_texts(journal), log_texts(run_dir), traces)
    replicas = sorted(set(en.gpu_components(series)) | _llm_components(series))
    kind = stack_kind(journal)
    out: list[Diagnosis] = []
    for rule in book.rules:
        for w in _windows(journal, rule):
            comps = replicas if rule.scope == sg.Scope.REPLICA else [""]
            for comp in comps:
                lines = _fires(ev, rule, ev.frame(w, comp))
                if lines is not None:
                    out.append(
                        Diagnosis(
                            rule=rule.id,
                            symptom=rule.symptom,
                            cause=rule.cause,
                            runbook=rule.runbook,
                            window=w.label,
                            component=comp,
                            evidence=tuple(lines),
                            checks=_commands(rule, kind, comp, run_dir),
                        )
                    )
    return out


def _commands(
    rule: Rule, kind: Stack, component: str, run_dir: Path
) -> tuple[tuple[str, str], ...]:
    name = component or "<component>"
    return tuple(
        (s.what, getattr(s, kind).replace("{component}", name).replace("{run_dir}", str(run_dir)))
        for s in rule.checks
    )


def _llm_components(series: SeriesSet) -> set[str]:
    return {s.label("component") for s in en.named(series, en.GEN_TOKENS)} - {""}
