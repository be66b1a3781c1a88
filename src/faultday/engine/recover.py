"""``faultday recover``: replay a crashed run's outstanding reverts, then its cleanups (objects
a participant or driver created), then stop its processes."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from faultday.core.ledger import LEDGER_NAME, RUN_TMP_DIR, Ledger, cleanup_registry
from faultday.core.marked import ledger_pids
from faultday.core.protocols import StackDriver
from faultday.core.targets import Target
from faultday.errors import FaultdayError
from faultday.injectors.base import injector_registry
from faultday.stack.supervisor import stop_marked_processes, stop_recorded_processes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoverContext:
    """FaultContext without a live stack: reverts act on the ledger's data alone."""

    run_dir: Path
    live: bool = False
    stack: StackDriver | None = None  # no live stack: reverts act on the ledger's data alone
    # True when recover goes on to stop the stack's processes: a revert that would
    # restart a component is then moot. False with --keep-processes: it cannot be done.
    stack_stops: bool = True

    def target(self, name: str) -> Target:
        raise FaultdayError(f"no live stack during recover (target {name!r})")

    def restart(self, component: str, *, timeout: float) -> None:
        if self.stack_stops:
            # Recover stops every process of the run next: nothing is left to restart.
            log.info("%s: not restarted; recover stops the stack", component)
            return
        raise FaultdayError(
            f"{component} cannot be restarted without a live stack, and --keep-processes "
            "keeps the stack running: it stays broken. Run `faultday recover` without "
            "--keep-processes to stop the stack, or restart the component yourself"
        )


@dataclass(slots=True)
class RecoverResult:
    reverted: int = 0
    cleaned: int = 0
    failed: int = 0
    stopped: int = 0
    messages: list[str] = field(default_factory=list)


def find_ledgers(report_dir: Path) -> list[Path]:
    """Run folders under ``report_dir`` with anything outstanding in their ledger.

    Outstanding: a revert, a cleanup or a process record not yet closed, or a live
    process carrying the ledger's marker (spawned before its PID could be written).
    """
    if not report_dir.is_dir():
        return []
    # Runs sit directly under it; shared stacks of game days and pytest sessions one deeper.
    ledgers = [Ledger(p) for p in sorted(report_dir.rglob(LEDGER_NAME))]
    return [
        ledger.path.parent
        for ledger in ledgers
        if ledger.outstanding_reverts()
        or ledger.outstanding_cleanups()
        or ledger.outstanding_processes()
        or ledger_pids(ledger)
    ]


def recover_run(run_dir: Path, *, stop_processes: bool = True) -> RecoverResult:
    """Revert LIFO; a revert that fails is reported and does not stop the others."""
    ledger = Ledger.in_dir(run_dir)
    result = RecoverResult()
    ctx = RecoverContext(run_dir=run_dir, stack_stops=stop_processes)
    registry = injector_registry()
    for revert in ledger.outstanding_reverts():
        what = f"{revert.injector} on {revert.target} (fault {revert.fault})"
        try:
            registry.get(revert.injector)().revert(ctx, revert)
        except Exception as exc:
            # Stays outstanding (only ok=True closes it): a later recover tries again.
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
        result.messages.extend(stop_run_processes(ledger, result))
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


def stop_run_processes(ledger: Ledger, result: RecoverResult) -> list[str]:
    """Stop every process the ledger knows (by record, then by marker); remove their temp paths.

    Also what ``faultday stack down`` does for a stack an earlier ``stack up`` left running.
    Counts go into ``result``; returns one message per process and per removed path.
    """
    messages = stop_recorded_processes(ledger)
    result.stopped += len(messages)
    # Then whatever still carries the run's marker: spawned before its PID reached the
    # ledger, or a helper that left its group.
    marked = stop_marked_processes(ledger)
    result.stopped += marked.stopped
    result.failed += marked.failed
    removed = []
    if not ledger_pids(ledger):
        # The processes' TMPDIR inside the run folder and the temporary paths recorded
        # outside it (a stack's own down removes them too).
        for path in [ledger.path.parent / RUN_TMP_DIR, *ledger.tmp_paths()]:
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(f"removed {path}")
    return messages + marked.messages + removed
