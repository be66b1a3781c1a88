"""The quarterly game day's scorecard: score a suite's journals, compare with the last one, render.

Running the suite is ``faultday.gameday``'s; this module only reads journals and
writes outputs. In ``<report-dir>/gameday-<UTC stamp>/``: one run folder per
scenario (journal + reports), ``gameday.json`` (this model: the input of the next
game day's trend and of ``faultday runbook render --results``), ``index.html``,
``junit.xml`` and ``runbooks/``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from faultday.core.journal import Journal, RunVerdict
from faultday.core.vocab import PreflightVerdict, WindowKind
from faultday.errors import FaultdayError, ScenarioError, UsageError
from faultday.report import energy as en
from faultday.report import runbooks as rb
from faultday.report.html import gameday_page
from faultday.report.junit import write_junit
from faultday.report.runbooks import Measured
from faultday.report.series import read_series
from faultday.report.view import not_evaluated, scenario_name

if TYPE_CHECKING:
    from faultday.report.runbooks import Measured, StackFacts


log = logging.getLogger(__name__)

GAMEDAY_VERSION = 1
GAMEDAY_JSON = "gameday.json"
GAMEDAY_PREFIX = "gameday-"

# Resilience score weights per check (docs/reports.md). What users lose decides the weight:
# lost work and double side effects worst, then errors and a missing degradation path,
# then the mechanisms (breakers, retries), then speed.
CHECK_WEIGHTS: dict[str, float] = {
    "tasks_lost": 5.0,
    "duplicate_side_effects": 5.0,
    "error_rate": 3.0,
    "fallback_rate": 3.0,
    "recovery_time": 3.0,
    "breaker": 2.0,
    "retry_amplification": 2.0,
    "degraded_reason": 2.0,
    "recall": 2.0,
    "audit": 2.0,
    "latency": 1.0,
    "throughput": 1.0,
    "goodput": 1.0,
    "health": 1.0,
    "metric": 1.0,
}
DEFAULT_WEIGHT = 1.0
# The worse of two verdicts decides a game day's exit status.
VERDICT_RANK = {
    RunVerdict.PASSED: 0,
    RunVerdict.FAILED: 1,
    RunVerdict.ABORTED: 2,
    RunVerdict.ERROR: 3,
    RunVerdict.RUNNING: 3,
}


def weight(check: str) -> float:
    return CHECK_WEIGHTS.get(check, DEFAULT_WEIGHT)


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Trend(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    SAME = "same"
    NEW = "new"


class GameDayCheck(_M):
    section: str
    check: str
    label: str
    window: str
    verdict: str  # passed | failed | error | not-evaluated
    expected: str = ""
    observed: str = ""
    weight: float = DEFAULT_WEIGHT

    @property
    def key(self) -> str:
        return f"{self.section}|{self.window}|{self.label}"


class Energy(_M):
    """Tokens per joule over every GPU replica of a run: baseline and during its faults."""

    baseline: float | None = None
    faults: float | None = None
    goodput_faults: float | None = Field(
        default=None, description="tokens/J of requests served ok and undegraded"
    )


class GameDayScenario(_M):
    name: str
    title: str
    file: str
    run_dir: str = Field(description="relative to the game-day folder")
    verdict: RunVerdict
    reason: str = ""
    severity: str = ""
    runbook: str | None = None
    score: float | None = None
    checks: list[GameDayCheck] = Field(default_factory=list)
    energy: Energy = Field(default_factory=Energy)


class GameDayPreflight(_M):
    """The preflight the game day ran first (``faultday preflight``), or that it was skipped."""

    verdict: PreflightVerdict = Field(description="passed, failed, error, aborted, or skipped")
    reason: str = ""
    run_dir: str = Field(default="", description="relative to the game-day folder")
    problems: list[str] = Field(default_factory=list, description="each failed check, with where")


class GameDay(_M):
    version: int = GAMEDAY_VERSION
    id: str
    started: float
    ended: float | None = None
    time_scale: float = 1.0
    tags: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    verdict: RunVerdict = RunVerdict.RUNNING
    score: float | None = None
    previous: str | None = Field(default=None, description="id of the game day compared against")
    scenarios: list[GameDayScenario] = Field(default_factory=list)
    stack_notes: list[str] = Field(default_factory=list)
    preflight: GameDayPreflight | None = None

    def write(self, folder: Path) -> Path:
        path = folder / GAMEDAY_JSON
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, path)
        return path


def read_gameday(folder: Path) -> GameDay:
    path = folder / GAMEDAY_JSON if folder.is_dir() else folder
    if not path.is_file():
        raise UsageError(f"{folder}: no {GAMEDAY_JSON} here (is it a game-day folder?)")
    return GameDay.model_validate_json(path.read_text(encoding="utf-8"))


# ---- scoring ----------------------------------------------------------------------


def scenario_checks(journal: Journal) -> list[GameDayCheck]:
    """Judged checks, plus declared ones a stopped run never judged (counted as not passed)."""
    out = [
        GameDayCheck(
            section=c.section,
            check=c.check,
            label=c.label,
            window=c.window,
            verdict=c.verdict,
            expected=c.expected,
            observed=c.observed,
            weight=weight(c.check),
        )
        for c in journal.checks
    ]
    for item in not_evaluated(journal):
        section, _, label = item.partition(": ")
        check = label.rsplit(": ", 1)[-1]
        out.append(
            GameDayCheck(
                section=section,
                check=check,
                label=label,
                window="",
                verdict="not-evaluated",
                weight=weight(check),
            )
        )
    return out


def score(checks: Sequence[GameDayCheck]) -> float | None:
    """100 × passed weight ÷ total weight; None when nothing was checked."""
    total = sum(c.weight for c in checks)
    if not total:
        return None
    return round(100.0 * sum(c.weight for c in checks if c.verdict == "passed") / total, 1)


def energy_of(journal: Journal) -> Energy:
    """The run's tokens per joule (its first fault window's, and the baseline's)."""
    rows = en.energy_rows(journal, read_series(Path(journal.run_dir)))
    base, fault = en.overall(rows, WindowKind.BASELINE), en.overall(rows, WindowKind.FAULT)
    return Energy(
        baseline=base.tokens_per_joule if base else None,
        faults=fault.tokens_per_joule if fault else None,
        goodput_faults=fault.goodput_per_joule if fault else None,
    )


def summarize(journal: Journal, gameday_dir: Path) -> GameDayScenario:
    checks = scenario_checks(journal)
    sc = score(checks)
    if journal.verdict in (RunVerdict.ERROR, RunVerdict.RUNNING) and not checks:
        sc = 0.0  # a scenario that could not run proves nothing: it scores zero
    return GameDayScenario(
        name=scenario_name(journal),
        title=journal.title,
        file=journal.scenario_file,
        run_dir=os.path.relpath(journal.run_dir, gameday_dir),
        verdict=journal.verdict,
        reason=journal.reason,
        severity=journal.severity,
        runbook=journal.runbook,
        score=sc,
        checks=checks,
        energy=energy_of(journal),
    )


def overall(gd: GameDay) -> None:
    """Fill in the game day's score and worst verdict from its scenarios."""
    checks = [c for s in gd.scenarios for c in s.checks]
    total = score(checks)
    errored = [s for s in gd.scenarios if s.score == 0.0 and not s.checks]
    if errored and checks:
        # Every scenario weighs at least one unit, so one that could not run pulls the score down.
        w = sum(c.weight for c in checks)
        total = round((total or 0.0) * w / (w + len(errored)), 1)
    gd.score = total if checks else (0.0 if errored else None)
    gd.verdict = max(
        (s.verdict for s in gd.scenarios), key=lambda v: VERDICT_RANK[v], default=RunVerdict.PASSED
    )
    if gd.preflight is not None and not gd.preflight.verdict.lets_the_game_day_start:
        # The game day refused to start: no scenario ran on a stack that was never validated.
        pre = RunVerdict(gd.preflight.verdict)
        gd.verdict = max(gd.verdict, pre, key=lambda v: VERDICT_RANK[v])


# ---- trend ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckTrend:
    scenario: str
    label: str
    section: str
    window: str
    before: str
    after: str
    observed_before: str
    observed_after: str
    trend: Trend


@dataclass(frozen=True, slots=True)
class ScenarioTrend:
    scenario: str
    before: str
    after: str
    score_before: float | None
    score_after: float | None
    trend: Trend
    tpj_before: float | None = None  # tokens/J during the faults at the previous game day
    tpj_after: float | None = None
    tpj_trend: Trend = Trend.NEW


_NUM = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _direction(before: str, after: str) -> Trend:
    good_b, good_a = before == "passed", after == "passed"
    if good_a and not good_b:
        return Trend.BETTER
    if good_b and not good_a:
        return Trend.WORSE
    return Trend.SAME


ENERGY_SAME = 0.05  # a tokens/J change within ±5 % is noise between two game days


def energy_trend(before: float | None, after: float | None) -> Trend:
    if before is None or after is None or before <= 0:
        return Trend.NEW
    change = after / before - 1.0
    if abs(change) <= ENERGY_SAME:
        return Trend.SAME
    return Trend.BETTER if change > 0 else Trend.WORSE


def find_previous(report_dir: Path, current: GameDay) -> GameDay | None:
    """The latest game day in ``report_dir`` that started before ``current``."""
    best: GameDay | None = None
    for path in sorted(report_dir.glob(f"{GAMEDAY_PREFIX}*/{GAMEDAY_JSON}")):
        try:
            gd = read_gameday(path)
        except (FaultdayError, ValueError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            continue
        if gd.id == current.id or gd.started >= current.started:
            continue
        if best is None or gd.started > best.started:
            best = gd
    return best


def trends(
    previous: GameDay | None, current: GameDay
) -> tuple[list[ScenarioTrend], list[CheckTrend]]:
    if previous is None:
        return [], []
    prev = {s.name: s for s in previous.scenarios}
    st: list[ScenarioTrend] = []
    ct: list[CheckTrend] = []
    for s in current.scenarios:
        p = prev.get(s.name)
        if p is None:
            st.append(ScenarioTrend(s.name, "—", s.verdict, None, s.score, Trend.NEW))
            continue
        if p.score is not None and s.score is not None and p.score != s.score:
            t = Trend.BETTER if s.score > p.score else Trend.WORSE
        else:
            t = _direction(p.verdict, s.verdict)
        st.append(
            ScenarioTrend(
                s.name,
                p.verdict,
                s.verdict,
                p.score,
                s.score,
                t,
                p.energy.faults,
                s.energy.faults,
                energy_trend(p.energy.faults, s.energy.faults),
            )
        )
        before = {c.key: c for c in p.checks}
        for c in s.checks:
            b = before.get(c.key)
            was, was_observed, trend = (
                ("—", "", Trend.NEW)
                if b is None
                else (b.verdict, b.observed, _direction(b.verdict, c.verdict))
            )
            ct.append(
                CheckTrend(
                    s.name,
                    c.label,
                    c.section,
                    c.window,
                    was,
                    c.verdict,
                    was_observed,
                    c.observed,
                    trend,
                )
            )
    return st, ct


# ---- outputs ----------------------------------------------------------------------


def measured(gd: GameDay) -> list[Measured]:
    """The game day's checks as runbooks quote them."""

    date = datetime.fromtimestamp(gd.started, UTC).strftime("%Y-%m-%d")
    return [
        Measured(
            scenario=s.name,
            runbook=s.runbook or "",
            check=c.check,
            label=c.label,
            window=c.window,
            expected=c.expected,
            observed=c.observed,
            verdict=c.verdict,
            date=date,
        )
        for s in gd.scenarios
        for c in s.checks
        if s.runbook
    ]


def render_gameday(
    gd: GameDay,
    folder: Path,
    *,
    journals: Sequence[Journal],
    previous: GameDay | None,
    base_dir: Path,
    runbook_facts: Callable[[], StackFacts],
) -> None:
    """``index.html``, ``junit.xml`` and ``runbooks/`` of a game day.

    ``runbook_facts`` describes the stack the runbooks are for; it is called only
    when runbook templates exist, and a FaultdayError from it becomes a note.
    """

    write_junit(journals, folder / "junit.xml", name=f"faultday {gd.id}")
    runbook_note = ""
    rdir = rb.find_runbook_dir(base_dir)
    if rdir is None:
        runbook_note = "runbook templates not found (runbooks/ next to the scenarios' project)"
    else:
        try:
            facts = runbook_facts()
            rb.render_runbooks(
                facts=facts, runbook_dir=rdir, out_dir=folder / "runbooks", results=measured(gd)
            )
        except (FaultdayError, ScenarioError) as exc:
            runbook_note = f"runbooks not rendered: {exc}"
            log.exception("%s", runbook_note)
    st, ct = trends(previous, gd)
    (folder / "index.html").write_text(
        gameday_page(
            gd=gd,
            previous=previous,
            scenario_trends=st,
            check_trends=ct,
            weights=CHECK_WEIGHTS,
            default_weight=DEFAULT_WEIGHT,
            runbooks=(folder / "runbooks" / "index.html").is_file(),
            runbook_note=runbook_note,
        ),
        encoding="utf-8",
    )
