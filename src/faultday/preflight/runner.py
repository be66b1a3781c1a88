"""Run a preflight: take the stack (running, the game day's, or started for it), check
configuration, interface, resources and logs in that order (the logs last, so that what
the probes provoked is read too), and write the result as a journal with its reports."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

from faultday import __version__
from faultday.core.journal import Journal, JournalCheck, RunVerdict
from faultday.core.ledger import Ledger
from faultday.core.preflight import PreflightSpec, load_preflight_file
from faultday.core.profile import StackProfile, load_profile
from faultday.core.protocols import StackDriver
from faultday.core.stackinfo import StackInfo
from faultday.core.vocab import Verdict
from faultday.engine.stacks import build_stack
from faultday.errors import FaultdayError, UsageError
from faultday.preflight.base import Area, Subject, error
from faultday.preflight.config import check_config, validate_agent_policies
from faultday.preflight.golden import default_log_rules, plan, run_golden, unknown_components
from faultday.preflight.logs import scan_logs
from faultday.preflight.resources import check_resources
from faultday.report.preflight import KIND, render_preflight

log = logging.getLogger(__name__)

PREFLIGHT_PREFIX = "preflight-"
# `faultday stack up` keeps a running stack's description here (cli_stack's STATE_ROOT and
# STATE_FILE; the commands cannot import each other, so the names are repeated).
STATE_ROOT = Path(".faultday") / "stack"
STATE_FILE = "state.json"


@dataclass(frozen=True, slots=True)
class PreflightOptions:
    """What ``faultday preflight`` was asked for."""

    profile: str = "local"
    base_dir: Path = field(default_factory=Path.cwd)
    report_dir: Path = Path("reports")
    driver: str = "process"
    driver_config: Path | None = None
    policy: str | None = None
    config: Path | None = None  # a preflight file (kind: Preflight); else the profile's
    state_dir: Path | None = None  # a stack `faultday stack up` started; None: look, else start
    look_for_running: bool = True  # False: a fresh stack even if `stack up` runs one (game day)


@dataclass(frozen=True, slots=True)
class PreflightOutcome:
    journal: Journal
    run_dir: Path
    report_errors: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.journal.verdict == RunVerdict.PASSED

    def problems(self) -> list[JournalCheck]:
        return [c for c in self.journal.checks if c.verdict in (Verdict.FAILED, Verdict.ERROR)]


def settings_for(options: PreflightOptions, profile: StackProfile) -> PreflightSpec:
    """The preflight file's spec if one is given, else the profile's ``spec.preflight``."""
    if options.config is not None:
        return load_preflight_file(options.config).spec
    return profile.spec.preflight


def new_folder(report_dir: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    folder = report_dir / f"{PREFLIGHT_PREFIX}{stamp}"
    n = 1
    while folder.exists():
        n += 1
        folder = report_dir / f"{PREFLIGHT_PREFIX}{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder.resolve()


def run_preflight(
    options: PreflightOptions, *, stack: StackDriver | None = None, folder: Path | None = None
) -> PreflightOutcome:
    """Preflight ``options.profile``: on ``stack`` if given (left running), on the stack
    ``faultday stack up`` runs, or on one started for it and stopped after."""
    profile = load_profile(options.profile, base_dir=options.base_dir)
    spec = settings_for(options, profile)  # a bad file fails here, before any stack starts
    validate_agent_policies(profile, options.base_dir)  # as would the agent: exit 2
    # A wrong --state-dir is a UsageError before any folder exists.
    running = _running(options, profile) if stack is None else None
    folder = folder or new_folder(options.report_dir)
    journal = _journal(folder, profile)
    journal.write(folder)
    own: StackDriver | None = None
    try:
        if stack is not None:
            info = stack.describe()
        elif running is not None:
            info = running
            log.info("preflight on the running stack in %s", info.run_dir)
        else:
            own = build_stack(
                str(Path(profile.source).resolve()) if profile.source else options.profile,
                scenario_file=options.base_dir / "preflight.yaml",
                base_dir=options.base_dir,
                run_dir=folder / "stack",
                ledger=Ledger.in_dir(folder),
                policy=options.policy,
                driver=options.driver,
                driver_config=options.driver_config,
            )
            own.up()
            info = own.describe()
        subject = Subject(
            profile=profile, info=info, spec=spec, base_dir=options.base_dir, folder=folder
        )
        journal.stack = info.model_dump(mode="json")
        journal.checks = run_checks(subject)
        journal.verdict, journal.reason = _verdict(journal.checks)
    except KeyboardInterrupt:
        journal.verdict, journal.reason = RunVerdict.ABORTED, "interrupted"
    except UsageError:
        raise  # a bad --driver-config: exit 2, like `faultday run`
    except FaultdayError as exc:
        journal.verdict, journal.reason = RunVerdict.ERROR, f"{type(exc).__name__}: {exc}"
        journal.errors.append(journal.reason)
    finally:
        if own is not None:
            try:
                own.down()
            except Exception as exc:
                log.exception("stack down failed")
                journal.errors.append(f"stack down failed: {exc}")
                journal.verdict = RunVerdict.ERROR
        journal.ended = time.time()
    errors: list[str] = []
    try:
        journal.artifacts.update(render_preflight(journal, folder))
    except Exception as exc:
        log.exception("preflight report failed")
        errors.append(f"preflight report: {type(exc).__name__}: {exc}")
        journal.errors.extend(errors)
    journal.write(folder)
    return PreflightOutcome(journal, folder, tuple(errors))


def run_checks(subject: Subject) -> list[JournalCheck]:
    """Every preflight check on a running stack, in order; none stops the others."""
    out: list[JournalCheck] = []
    for area, step in (
        (Area.CONFIG, check_config),
        (Area.INTERFACE, _interface),
        (Area.RESOURCES, check_resources),
        (Area.LOGS, _logs),
    ):
        try:
            out.extend(step(subject))
        except Exception as exc:
            log.exception("preflight %s failed", area)
            out.append(
                error(area, area.value, f"{area.value} checks", f"{type(exc).__name__}: {exc}")
            )
    return out


def _interface(subject: Subject) -> list[JournalCheck]:
    out = [
        error(Area.INTERFACE, "golden", "golden request", p) for p in unknown_components(subject)
    ]
    return out + run_golden(subject, plan(subject))


def _logs(subject: Subject) -> list[JournalCheck]:
    return scan_logs(subject, (*default_log_rules(), *subject.spec.log_ignore))


def _verdict(checks: list[JournalCheck]) -> tuple[RunVerdict, str]:
    bad = [c for c in checks if c.verdict == Verdict.FAILED]
    broken = [c for c in checks if c.verdict == Verdict.ERROR]
    if broken:
        return RunVerdict.ERROR, f"{len(broken)} checks could not run"
    if bad:
        names = ", ".join(c.label for c in bad[:3]) + (" …" if len(bad) > 3 else "")
        return RunVerdict.FAILED, f"{len(bad)} of {len(checks)} checks failed: {names}"
    return RunVerdict.PASSED, f"all {len(checks)} checks passed"


def _journal(folder: Path, profile: StackProfile) -> Journal:
    return Journal(
        faultday_version=__version__,
        run_id=folder.name,
        run_dir=str(folder),
        scenario_file=profile.source,
        scenario={
            "kind": KIND,
            "metadata": {
                "name": f"preflight-{profile.name}",
                "title": f"Preflight of stack {profile.name}",
            },
        },
        title=f"Preflight of stack {profile.name}",
        stack_profile=profile.name,
        started=time.time(),
    )


def _running(options: PreflightOptions, profile: StackProfile) -> StackInfo | None:
    """The stack `faultday stack up` started for this profile, if every process still runs."""
    if options.state_dir is None and not options.look_for_running:
        return None
    folder = options.state_dir or options.base_dir / STATE_ROOT / profile.name
    f = folder / STATE_FILE
    if not f.is_file():
        if options.state_dir is not None:
            raise UsageError(f"--state-dir {folder}: no {STATE_FILE} (is a stack up there?)")
        return None
    try:
        info = StackInfo.model_validate(json.loads(f.read_text(encoding="utf-8"))["info"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{f}: not a stack state file: {exc}") from exc
    down = [c.name for c in info.components if c.pid is None or not psutil.pid_exists(c.pid)]
    if not down:
        return info
    if options.state_dir is not None:
        raise UsageError(f"{folder}: {_down_message(down, len(info.components))}")
    log.info("not the stack in %s: %s", folder, _down_message(down, len(info.components)))
    return None


def _down_message(down: list[str], total: int) -> str:
    if len(down) == total:
        return f"the stack there is not running: none of its {total} components runs"
    names = ", ".join(down)
    up = total - len(down)
    return (
        f"{len(down)} of {total} components down ({names}); the other {up} "
        f"{'is' if up == 1 else 'are'} up (restart the stack: faultday stack down, then up)"
    )
