"""The on-disk ledger: every revert, every cleanup and every started process, fsynced.

``ledger.jsonl`` in the run folder is append-only. A revert, a cleanup or a
process is *outstanding* until a matching ``done`` / ``cleanup_done`` /
``stopped`` record follows it; that is what ``faultday recover`` replays after
the harness itself was killed.

A *cleanup* is something a participant or a driver created that must be
removed after a crash (e.g. the load's Kubernetes Jobs). Unlike a fault's
revert, the engine never replays it during a run: its owner removes it on the
normal path (after reading what it needs from it) and marks it done; only
``faultday recover`` runs outstanding ones, through a plugin of the
``faultday.cleanups`` group named by the record's ``injector`` field.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from faultday.core.plugins import Registry
from faultday.core.targets import Revert
from faultday.errors import FaultdayError

log = logging.getLogger(__name__)

LEDGER_NAME = "ledger.jsonl"
# Every process the harness starts carries this variable, set to its ledger's marker, and
# passes it on to its own children (tritonserver, Python stubs, Locust workers): recover
# finds them by it even when the harness died before it could write their PIDs down.
MARKER_ENV = "FAULTDAY_MARKER"
# Inside the folder that holds the ledger: the TMPDIR of every process it records.
RUN_TMP_DIR = "tmp"
# Its own entry-point group, not faultday.injectors: a cleanup is no fault, and an
# injector entry would be offered to scenarios (`inject: ...`) and listed as one.
CLEANUPS = "faultday.cleanups"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A child process the harness started; stopped by killing its process group."""

    component: str
    pid: int
    pgid: int
    create_time: float  # psutil's, so a recycled PID is never killed by mistake


class Cleanup(ABC):
    """Removes, after a crash, what one kind of participant or driver created (a plugin).

    Registered by short name in the ``faultday.cleanups`` entry-point group; a
    cleanup record's ``injector`` field names it. It gets only the record's
    data (no live stack), must tolerate objects already gone, and returns one
    line per thing it removed or found gone; it raises FaultdayError when
    something could not be removed (the record then stays outstanding).
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""

    @abstractmethod
    def cleanup(self, record: Revert) -> list[str]:
        """Remove what ``record`` describes; idempotent."""


def cleanup_registry() -> Registry[Cleanup]:
    return Registry(CLEANUPS, "cleanup")


class _Record(BaseModel):
    # Records of a newer faultday may carry fields this one does not know: read past them.
    model_config = ConfigDict(extra="ignore", frozen=True)

    ts: float | None = None  # set when the record is written (time.time())


class MarkerRecord(_Record):
    op: Literal["marker"] = "marker"
    marker: str


class SpawnRecord(_Record):
    op: Literal["spawn"] = "spawn"
    component: str


class TmpRecord(_Record):
    op: Literal["tmp"] = "tmp"
    path: str


class PhaseRecord(_Record):
    op: Literal["phase"] = "phase"
    phase: str


class RevertRecord(_Record):
    op: Literal["revert"] = "revert"
    revert: dict[str, JsonValue]  # Revert.to_json()


class DoneRecord(_Record):
    op: Literal["done"] = "done"
    id: str
    ok: bool
    error: str = ""


class CleanupRecord(_Record):
    op: Literal["cleanup"] = "cleanup"
    cleanup: dict[str, JsonValue]  # Revert.to_json()


class CleanupDoneRecord(_Record):
    op: Literal["cleanup_done"] = "cleanup_done"
    id: str
    ok: bool
    error: str = ""


class ProcessStarted(_Record):
    op: Literal["process"] = "process"
    component: str
    pid: int
    pgid: int
    create_time: float


class ProcessStopped(_Record):
    op: Literal["stopped"] = "stopped"
    pid: int


LedgerRecord = Annotated[
    MarkerRecord
    | SpawnRecord
    | TmpRecord
    | PhaseRecord
    | RevertRecord
    | DoneRecord
    | CleanupRecord
    | CleanupDoneRecord
    | ProcessStarted
    | ProcessStopped,
    Field(discriminator="op"),
]
_RECORD: TypeAdapter[LedgerRecord] = TypeAdapter(LedgerRecord)


class Ledger:
    """Append-only, fsynced record of what must be undone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._marker: str | None = None
        path.parent.mkdir(parents=True, exist_ok=True)

    @classmethod
    def in_dir(cls, run_dir: Path) -> Ledger:
        return cls(run_dir / LEDGER_NAME)

    def _append(self, record: LedgerRecord) -> None:
        fields = record.model_dump(mode="json", exclude={"ts"})
        line = json.dumps({"ts": time.time(), **fields}, separators=(",", ":")) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                # A torn last line (a harness killed mid-write, a full disk) must not swallow
                # this record: start it on a line of its own.
                if _ends_torn(fd):
                    line = "\n" + line
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def marker(self) -> str:
        """This ledger's process marker (the value of MARKER_ENV), written once, on first use."""
        with self._lock:
            if self._marker is None:
                found = [r.marker for r in self.entries() if isinstance(r, MarkerRecord)]
                self._marker = found[0] if found else uuid.uuid4().hex
                if not found:
                    self._append(MarkerRecord(marker=self._marker))
            return self._marker

    def markers(self) -> set[str]:
        """Every marker this ledger handed out (one, or none if nothing was ever spawned)."""
        return {r.marker for r in self.entries() if isinstance(r, MarkerRecord)}

    def add_spawn(self, component: str) -> dict[str, str]:
        """Before a spawn: the intent, on disk. Returns the variables the child must carry."""
        marker = self.marker()
        self._append(SpawnRecord(component=component))
        return {MARKER_ENV: marker}

    def add_tmp(self, path: Path) -> None:
        """Before creating it: a temporary path outside the run folder, removed by recover."""
        self._append(TmpRecord(path=str(path)))

    def tmp_paths(self) -> list[Path]:
        """Temporary paths recorded with ``add_tmp`` (recover removes those that still exist)."""
        return [Path(r.path) for r in self.entries() if isinstance(r, TmpRecord)]

    def spawn_times(self) -> list[float]:
        """When each spawn was recorded (a process of the run started just after one)."""
        return [r.ts for r in self.entries() if isinstance(r, SpawnRecord) and r.ts is not None]

    def note_phase(self, phase: str) -> None:
        """Where the run is: tells recover (and a reader) in which phase a harness died."""
        self._append(PhaseRecord(phase=phase))

    def last_phase(self) -> str | None:
        phases = [r.phase for r in self.entries() if isinstance(r, PhaseRecord)]
        return phases[-1] if phases else None

    def add_revert(self, revert: Revert) -> None:
        self._append(RevertRecord(revert=revert.to_json()))

    def revert_done(self, revert: Revert, *, ok: bool, error: str = "") -> None:
        self._append(DoneRecord(id=revert.id, ok=ok, error=error))

    def add_cleanup(self, record: Revert) -> None:
        """Before creating anything: what ``faultday recover`` must remove after a crash."""
        self._append(CleanupRecord(cleanup=record.to_json()))

    def cleanup_done(self, record: Revert, *, ok: bool, error: str = "") -> None:
        self._append(CleanupDoneRecord(id=record.id, ok=ok, error=error))

    def add_process(self, proc: ProcessRecord) -> None:
        self._append(
            ProcessStarted(
                component=proc.component,
                pid=proc.pid,
                pgid=proc.pgid,
                create_time=proc.create_time,
            )
        )

    def process_stopped(self, pid: int) -> None:
        self._append(ProcessStopped(pid=pid))

    def records(self) -> list[dict[str, JsonValue]]:
        """Every readable record as written (JSON objects); torn lines skipped with a warning."""
        if not self.path.exists():
            return []
        out: list[dict[str, JsonValue]] = []
        try:
            lines = self.path.read_bytes().decode("utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise FaultdayError(f"{self.path}: cannot read the ledger: {exc}") from exc
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                # A harness killed mid-write (or a full disk) tears a record. It was written
                # *before* its action, so the action never began: skip it, keep the rest.
                log.warning("%s:%d: torn ledger record skipped: %s", self.path, n, exc)
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def entries(self) -> list[LedgerRecord]:
        """Every readable record, typed by its ``op``; a malformed one is skipped with a warning."""
        out: list[LedgerRecord] = []
        for rec in self.records():
            try:
                out.append(_RECORD.validate_python(rec))
            except ValidationError as exc:
                why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                log.warning(
                    "%s: malformed %s record skipped: %r (%s)", self.path, rec.get("op"), rec, why
                )
        return out

    def _outstanding(
        self, kind: type[RevertRecord | CleanupRecord], done: type[DoneRecord | CleanupDoneRecord]
    ) -> list[Revert]:
        pending: dict[str, Revert] = {}
        for rec in self.entries():
            if isinstance(rec, kind):
                raw = rec.revert if isinstance(rec, RevertRecord) else rec.cleanup
                try:
                    rev = Revert.from_json(raw)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("%s: malformed %s record skipped: %s", self.path, rec.op, exc)
                    continue
                pending[rev.id] = rev
            elif isinstance(rec, done) and rec.ok:
                pending.pop(rec.id, None)
        return list(reversed(pending.values()))

    def outstanding_reverts(self) -> list[Revert]:
        """Reverts not yet done, newest first (the order they must run in)."""
        return self._outstanding(RevertRecord, DoneRecord)

    def outstanding_cleanups(self) -> list[Revert]:
        """Cleanups not yet done, newest first; never replayed by a live run, only by recover."""
        return self._outstanding(CleanupRecord, CleanupDoneRecord)

    def outstanding_processes(self) -> list[ProcessRecord]:
        """Processes started and not recorded as stopped, newest first."""
        procs: dict[int, ProcessRecord] = {}
        for rec in self.entries():
            if isinstance(rec, ProcessStarted):
                procs[rec.pid] = ProcessRecord(
                    component=rec.component,
                    pid=rec.pid,
                    pgid=rec.pgid,
                    create_time=rec.create_time,
                )
            elif isinstance(rec, ProcessStopped):
                procs.pop(rec.pid, None)
        return list(reversed(procs.values()))


def _ends_torn(fd: int) -> bool:
    """True when the file does not end with a newline (its last record is torn)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
