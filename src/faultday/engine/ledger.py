"""The on-disk ledger: every revert and every started process, fsynced.

``ledger.jsonl`` in the run folder is append-only. A revert or a process is
*outstanding* until a matching ``done`` / ``stopped`` record follows it; that
is what ``faultday recover`` replays after the harness itself was killed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from faultday.errors import FaultdayError
from faultday.injectors.base import Revert

LEDGER_NAME = "ledger.jsonl"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A child process the harness started; stopped by killing its process group."""

    component: str
    pid: int
    pgid: int
    create_time: float  # psutil's, so a recycled PID is never killed by mistake


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
        for n, line in enumerate(self.path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                # A harness killed mid-write leaves at most a torn last line.
                if n == len(self.path.read_text().splitlines()):
                    break
                raise FaultdayError(f"{self.path}:{n}: corrupt ledger line: {exc}") from exc
            out.append(rec)
        return out

    def outstanding_reverts(self) -> list[Revert]:
        """Reverts not yet done, newest first (the order they must run in)."""
        pending: dict[str, Revert] = {}
        for rec in self.records():
            if rec.get("op") == "revert" and isinstance(rec.get("revert"), dict):
                raw = rec["revert"]
                assert isinstance(raw, dict)
                rev = Revert.from_json(raw)
                pending[rev.id] = rev
            elif rec.get("op") == "done" and rec.get("ok"):
                pending.pop(str(rec.get("id")), None)
        return list(reversed(pending.values()))

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
