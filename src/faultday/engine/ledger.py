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
import os
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import JsonValue

from faultday.errors import FaultdayError
from faultday.injectors.base import Revert
from faultday.plugins import Registry

LEDGER_NAME = "ledger.jsonl"
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


class Ledger:
    """Append-only, fsynced record of what must be undone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    @classmethod
    def in_dir(cls, run_dir: Path) -> Ledger:
        return cls(run_dir / LEDGER_NAME)

    def _append(self, record: dict[str, JsonValue]) -> None:
        record = {"ts": time.time(), **record}
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def add_revert(self, revert: Revert) -> None:
        self._append({"op": "revert", "revert": revert.to_json()})

    def revert_done(self, revert: Revert, *, ok: bool, error: str = "") -> None:
        self._append({"op": "done", "id": revert.id, "ok": ok, "error": error})

    def add_cleanup(self, record: Revert) -> None:
        """Before creating anything: what ``faultday recover`` must remove after a crash."""
        self._append({"op": "cleanup", "cleanup": record.to_json()})

    def cleanup_done(self, record: Revert, *, ok: bool, error: str = "") -> None:
        self._append({"op": "cleanup_done", "id": record.id, "ok": ok, "error": error})

    def add_process(self, proc: ProcessRecord) -> None:
        self._append(
            {
                "op": "process",
                "component": proc.component,
                "pid": proc.pid,
                "pgid": proc.pgid,
                "create_time": proc.create_time,
            }
        )

    def process_stopped(self, pid: int) -> None:
        self._append({"op": "stopped", "pid": pid})

    def records(self) -> list[dict[str, JsonValue]]:
        if not self.path.exists():
            return []
        out: list[dict[str, JsonValue]] = []
        lines = self.path.read_text().splitlines()
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                # A harness killed mid-write leaves at most a torn last line.
                if n == len(lines):
                    break
                raise FaultdayError(f"{self.path}:{n}: corrupt ledger line: {exc}") from exc
            out.append(rec)
        return out

    def _outstanding(self, op: str, done_op: str) -> list[Revert]:
        pending: dict[str, Revert] = {}
        for rec in self.records():
            raw = rec.get(op)
            if rec.get("op") == op and isinstance(raw, dict):
                rev = Revert.from_json(raw)
                pending[rev.id] = rev
            elif rec.get("op") == done_op and rec.get("ok"):
                pending.pop(str(rec.get("id")), None)
        return list(reversed(pending.values()))

    def outstanding_reverts(self) -> list[Revert]:
        """Reverts not yet done, newest first (the order they must run in)."""
        return self._outstanding("revert", "done")

    def outstanding_cleanups(self) -> list[Revert]:
        """Cleanups not yet done, newest first; never replayed by a live run, only by recover."""
        return self._outstanding("cleanup", "cleanup_done")

    def outstanding_processes(self) -> list[ProcessRecord]:
        """Processes started and not recorded as stopped, newest first."""
        procs: dict[int, ProcessRecord] = {}
        for rec in self.records():
            op = rec.get("op")
            if op == "process":
                pid = int(rec["pid"])  # type: ignore[arg-type]
                procs[pid] = ProcessRecord(
                    component=str(rec["component"]),
                    pid=pid,
                    pgid=int(rec["pgid"]),  # type: ignore[arg-type]
                    create_time=float(rec["create_time"]),  # type: ignore[arg-type]
                )
            elif op == "stopped":
                procs.pop(int(rec["pid"]), None)  # type: ignore[arg-type]
        return list(reversed(procs.values()))
