"""``faultday recover``: replay a crashed run's outstanding reverts, then its cleanups (objects
a participant or driver created), then stop its processes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from faultday.engine.ledger import LEDGER_NAME, Ledger, cleanup_registry
from faultday.errors import FaultdayError
from faultday.injectors.base import Target, injector_registry

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _RecoverCtx:
    """FaultContext without a live stack: reverts act on the ledger's data alone."""

    run_dir: Path
    live: bool = False

    def target(self, name: str) -> Target:
        raise FaultdayError(f"no live stack during recover (target {name!r})")

    def restart(self, component: str, *, timeout: float) -> None:
        raise FaultdayError(f"no live stack during recover (restart {component!r})")


@dataclass(slots=True)
class RecoverResult:
    reverted: int = 0
    cleaned: int = 0
    failed: int = 0
    stopped: int = 0
    messages: list[str] = field(default_factory=list)


def find_ledgers(report_dir: Path) -> list[Path]:
    """Run folders under ``report_dir`` with anything outstanding in their ledger."""
    if not report_dir.is_dir():
        return []
    out = []
    # Runs sit directly under it; shared stacks of game days and pytest sessions one deeper.
    for ledger_path in sorted(report_dir.rglob(LEDGER_NAME)):
        ledger = Ledger(ledger_path)
        if (
            ledger.outstanding_reverts()
            or ledger.outstanding_cleanups()
            or ledger.outstanding_processes()
        ):
            out.append(ledger_path.parent)
    return out


def recover_run(run_dir: Path, *, stop_processes: bool = True) -> RecoverResult:
    """Revert LIFO; a revert that fails is reported and does not stop the others."""
    ledger = Ledger.in_dir(run_dir)
    result = RecoverResult()
    ctx = _RecoverCtx(run_dir=run_dir)
    registry = injector_registry()
    for revert in ledger.outstanding_reverts():
        what = f"{revert.injector} on {revert.target} (fault {revert.fault})"
        try:
            registry.get(revert.injector)().revert(ctx, revert)
        except Exception as exc:
            ledger.revert_done(revert, ok=False, error=str(exc))
            result.failed += 1
            result.messages.append(f"FAILED to revert {what}: {exc}")
            log.exception("revert failed: %s", what)
            continue
        ledger.revert_done(revert, ok=True)
        result.reverted += 1
        result.messages.append(f"reverted {what}")
    # After the faults, like at the end of a run (faults first, then what was started);
    # before the processes, which a cleanup never needs: it rebuilds its access from its record.
    _run_cleanups(ledger, result)
    if stop_processes:
        result.messages.extend(_stop_processes(ledger, result))
    if not result.messages:
        result.messages.append("nothing outstanding")
    return result


def _run_cleanups(ledger: Ledger, result: RecoverResult) -> None:
    """Replay outstanding cleanups newest first; a failing one is reported, the rest still run."""
    registry = cleanup_registry()
    for record in ledger.outstanding_cleanups():
        what = f"{record.injector} {record.target} ({record.action})"
        try:
            lines = registry.get(record.injector)().cleanup(record)
        except Exception as exc:
            ledger.cleanup_done(record, ok=False, error=str(exc))
            result.failed += 1
            result.messages.append(f"FAILED to clean up {what}: {exc}")
            log.exception("cleanup failed: %s", what)
            continue
        ledger.cleanup_done(record, ok=True)
        result.cleaned += 1
        result.messages.append(f"cleaned up {what}")
        result.messages.extend(f"  {line}" for line in lines)


def _stop_processes(ledger: Ledger, result: RecoverResult) -> list[str]:
    if not ledger.outstanding_processes():
        return []
    try:
        from faultday.stack.supervisor import stop_recorded_processes
    except ImportError as exc:  # a build without the stack driver
        return [f"cannot stop {len(ledger.outstanding_processes())} processes: {exc}"]
    messages = stop_recorded_processes(ledger)
    result.stopped += len(messages)
    return messages
