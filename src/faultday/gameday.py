"""Run the quarterly game day: every scenario of a suite in turn, on a shared stack.

Each scenario runs through :func:`faultday.session.run_scenario`; the scorecard,
the trend and the outputs are ``faultday.report.gameday``'s, which only reads the
journals this produces.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from faultday.core.events import (
    EventHook,
    GameDayEnded,
    PreflightDone,
    PreflightStarted,
    RunEvents,
    ScenarioStarted,
)
from faultday.core.journal import Journal, RunVerdict
from faultday.core.profile import load_profile
from faultday.core.vocab import PreflightVerdict
from faultday.errors import ScenarioError, UsageError
from faultday.preflight.runner import PreflightOptions, run_preflight
from faultday.report.gameday import (
    GAMEDAY_PREFIX,
    VERDICT_RANK,
    GameDay,
    GameDayPreflight,
    find_previous,
    overall,
    render_gameday,
    summarize,
)
from faultday.report.runbooks import ComponentFact, Driver, StackFacts, driver_for, policy_facts
from faultday.scenario.loader import LoadedScenario, find_scenarios, load_scenario, stack_ref
from faultday.session import (
    Settings,
    SignalPolicy,
    StackPool,
    run_scenario,
    target_resolver,
)

log = logging.getLogger(__name__)

P = TypeVar("P")


class _Firing:
    """Fires the game day's own hooks; a listener that raised (logged at ERROR by the hook)
    is noted on the scorecard and makes the game day's verdict error."""

    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self.failures: list[str] = []

    def fire(self, hook: EventHook[P], payload: P) -> None:
        self.failures += [f.describe() for f in hook.fire(payload)]

    def settle(self, gd: GameDay) -> None:
        """Note the failures so far on the scorecard; its verdict becomes error."""
        if not self.failures:
            return
        gd.stack_notes.extend(self.failures)
        self.failures = []
        gd.verdict = max(gd.verdict, RunVerdict.ERROR, key=lambda v: VERDICT_RANK[v])


def load_suite(
    paths: Sequence[Path], *, tags: Sequence[str], base_dir: Path
) -> list[LoadedScenario]:
    """Scenarios under ``paths`` with one of ``tags``; every invalid one reported at once."""
    files = find_scenarios(paths)
    if not files:
        raise UsageError(f"no *.scenario.yaml files in {', '.join(map(str, paths))}")
    resolver = target_resolver(base_dir)
    loaded, problems = [], []
    for f in files:
        try:
            loaded.append(load_scenario(f, resolve_targets=resolver))
        except ScenarioError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ScenarioError(problems)
    if tags:
        loaded = [x for x in loaded if set(tags) & set(x.scenario.metadata.tags)]
        if not loaded:
            raise UsageError(f"no scenario is tagged {', '.join(tags)}")
    return loaded


def run_gameday(
    paths: Sequence[Path],
    *,
    tags: Sequence[str] = (),
    time_scale: float = 1.0,
    report_dir: Path = Path("reports"),
    base_dir: Path | None = None,
    reuse_stack: bool = True,
    events: RunEvents | None = None,
    runbook_stack: str | None = None,
    signals: SignalPolicy | None = None,
    preflight: bool = True,
) -> tuple[GameDay, Path]:
    """Run every scenario in turn; write the game day's outputs; return it and its folder.

    ``signals`` is the command's installed policy: each run is attached to it, and
    once it has been asked to stop no further scenario starts. ``preflight`` first
    checks the first scenario's stack (``faultday preflight``); on a failure no
    scenario runs. ``events`` are the hooks the game day and each of its runs fire
    (core/events.py): a display subscribes once for the whole game day.
    """
    base = base_dir or Path.cwd()
    suite = load_suite(paths, tags=tags, base_dir=base)
    firing = _Firing(events or RunEvents())
    folder = _new_folder(report_dir, now := datetime.now(UTC))
    gd = GameDay(
        id=folder.name,
        started=now.timestamp(),
        time_scale=time_scale,
        tags=list(tags),
        paths=[str(p) for p in paths],
    )
    gd.write(folder)
    pool = StackPool(folder, base_dir=base, notes=gd.stack_notes) if reuse_stack else None
    settings = Settings(report_dir=folder, base_dir=base, time_scale=time_scale)
    journals: list[Journal] = []
    try:
        gd.preflight = _preflight(
            suite, folder=folder, base=base, pool=pool, enabled=preflight, firing=firing
        )
        gd.write(folder)
        pre = gd.preflight
        firing.fire(
            firing.events.preflight_done,
            PreflightDone(pre.verdict, pre.reason, tuple(pre.problems)),
        )
        if not gd.preflight.verdict.lets_the_game_day_start:
            gd.stack_notes.append("preflight did not pass: no scenario was started")
            suite = []
        for i, loaded in enumerate(suite):
            if signals is not None and signals.stop_requested:
                gd.stack_notes.append(f"stopped before {loaded.scenario.name}")
                break
            firing.fire(
                firing.events.scenario_started,
                ScenarioStarted(loaded.scenario.name, i, len(suite)),
            )
            outcome = run_scenario(
                loaded, settings=settings, pool=pool, signals=signals, events=firing.events
            )
            for err in outcome.report_errors:
                log.error("report error: %s", err)
            journals.append(outcome.journal)
            gd.scenarios.append(summarize(outcome.journal, folder))
            gd.write(folder)
    finally:
        if pool is not None:
            pool.close()
        gd.ended = datetime.now(UTC).timestamp()
        overall(gd)
        firing.settle(gd)
        previous = find_previous(report_dir, gd)
        gd.previous = previous.id if previous else None
        firing.fire(
            firing.events.gameday_ended,
            GameDayEnded(gd.id, folder, gd.verdict, gd.score, len(gd.scenarios)),
        )
        firing.settle(gd)
        gd.write(folder)
        stack = runbook_stack or _suite_stack(suite)
        render_gameday(
            gd,
            folder,
            journals=journals,
            previous=previous,
            base_dir=base,
            runbook_facts=lambda: facts_from_profile(stack, base_dir=base),
        )
    return gd, folder


PREFLIGHT_DIR = "preflight"
MAX_PROBLEMS = 20  # listed on the scorecard; the preflight's own report has them all


def _preflight(
    suite: Sequence[LoadedScenario],
    *,
    folder: Path,
    base: Path,
    pool: StackPool | None,
    enabled: bool,
    firing: _Firing,
) -> GameDayPreflight:
    """Preflight the first scenario's stack: the pool's (then reused by the scenario) or its own."""
    if not enabled:
        return GameDayPreflight(verdict=PreflightVerdict.SKIPPED, reason="--skip-preflight")
    if not suite:
        return GameDayPreflight(verdict=PreflightVerdict.PASSED, reason="no scenario to run")
    first = suite[0]
    spec = first.scenario.spec
    options = PreflightOptions(
        profile=stack_ref(spec.stack, first.file),
        base_dir=base,
        policy=spec.policy,
        look_for_running=False,  # the stack the scenarios run on, not one `stack up` left
    )
    where = folder / PREFLIGHT_DIR
    where.mkdir()
    firing.fire(firing.events.preflight_started, PreflightStarted(options.profile))
    try:
        stack = pool.get(first) if pool is not None else None
    except Exception as exc:  # a stack that does not start fails the preflight
        log.exception("the stack for the preflight did not come up")
        return GameDayPreflight(
            verdict=PreflightVerdict.ERROR, reason=f"the stack did not come up: {exc}"
        )
    outcome = run_preflight(options, stack=stack, folder=where.resolve())
    problems = [
        f"{c.window}: {c.label} — expected {c.expected}, observed {c.observed}"
        + (f" — {c.message}" if c.message else "")
        for c in outcome.problems()
    ]
    return GameDayPreflight(
        verdict=PreflightVerdict(outcome.journal.verdict),
        reason=outcome.journal.reason,
        run_dir=PREFLIGHT_DIR,
        problems=problems[:MAX_PROBLEMS],
    )


def _new_folder(report_dir: Path, now: datetime) -> Path:
    stamp = now.strftime("%Y%m%dT%H%M%S")
    folder = report_dir / f"{GAMEDAY_PREFIX}{stamp}"
    n = 1
    while folder.exists():
        n += 1
        folder = report_dir / f"{GAMEDAY_PREFIX}{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def _suite_stack(suite: Sequence[LoadedScenario]) -> str:
    if not suite:
        return "local"
    first = suite[0]
    return stack_ref(first.scenario.spec.stack, first.file)


def facts_from_profile(profile: str, *, base_dir: Path, driver: str | None = None) -> StackFacts:
    """Facts of a stack profile; docker/k8s without a profile of their own use ``local``'s."""
    drv = driver_for(profile, driver)
    try:
        prof = load_profile(profile, base_dir=base_dir)
    except ScenarioError:
        if drv == Driver.LOCAL:
            raise
        log.info("no stack profile %r; the %s driver renders the local profile", profile, drv)
        prof = load_profile("local", base_dir=base_dir)
    comps = tuple(ComponentFact(n, c.type) for n, c in prof.spec.components.items())
    return StackFacts(
        profile=prof.name if drv == Driver.LOCAL else Path(profile).stem,
        driver=drv,
        components=comps,
        edges=tuple(prof.spec.edges),
        policy=policy_facts(base_dir / "stack" / "agent.yaml", prof.spec.policy),
    )
