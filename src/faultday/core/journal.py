"""``journal.json``: the versioned record of a run; every report is rendered from it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from faultday.core.vocab import RunVerdict, Section, Verdict, WindowKind

__all__ = [
    "JOURNAL_NAME",
    "JOURNAL_VERSION",
    "Journal",
    "JournalCheck",
    "JournalEvent",
    "JournalFault",
    "JournalWindow",
    "RunVerdict",
    "read_journal",
]

JOURNAL_VERSION = 1
JOURNAL_NAME = "journal.json"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JournalEvent(_M):
    t: float = Field(description="scenario seconds from t=0 (negative before it)")
    wall: float = Field(description="Unix time")
    kind: str
    message: str = ""
    fault: str | None = None
    target: str | None = None
    data: dict[str, JsonValue] = Field(default_factory=dict)


class JournalWindow(_M):
    kind: WindowKind
    label: str
    start: float
    end: float
    fault: str = ""


class JournalFault(_M):
    name: str
    inject: str
    target: str
    at: float
    duration: float | None
    params: dict[str, JsonValue] = Field(default_factory=dict)
    injected_at: float | None = None
    reverted_at: float | None = None
    revert_ok: bool | None = None
    error: str = ""


class JournalCheck(_M):
    section: Section
    check: str
    label: str
    window: str
    verdict: Verdict
    expected: str = ""
    observed: str = ""
    n: int = 0
    message: str = ""
    params: dict[str, JsonValue] = Field(default_factory=dict)


class Journal(_M):
    version: int = JOURNAL_VERSION
    faultday_version: str
    run_id: str
    run_dir: str
    scenario_file: str
    scenario: dict[str, JsonValue]
    title: str = ""
    severity: str = ""
    runbook: str | None = None
    tags: list[str] = Field(default_factory=list)
    stack_profile: str = ""
    stack: dict[str, JsonValue] = Field(default_factory=dict)
    components: dict[str, str] = Field(default_factory=dict, description="name → version")
    time_scale: float = 1.0
    duration: float = 0.0
    started: float = 0.0
    ended: float | None = None
    t0_wall: float | None = None
    verdict: RunVerdict = RunVerdict.RUNNING
    reason: str = ""
    errors: list[str] = Field(default_factory=list)
    events: list[JournalEvent] = Field(default_factory=list)
    windows: list[JournalWindow] = Field(default_factory=list)
    faults: list[JournalFault] = Field(default_factory=list)
    checks: list[JournalCheck] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict, description="name → file in run dir")

    def write(self, run_dir: Path) -> Path:
        """Write atomically (temp file + rename): a killed harness never leaves half a journal."""
        path = run_dir / JOURNAL_NAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        os.replace(tmp, path)
        return path


def read_journal(run_dir_or_file: Path) -> Journal:
    path = run_dir_or_file / JOURNAL_NAME if run_dir_or_file.is_dir() else run_dir_or_file
    raw = json.loads(path.read_text())
    return Journal.model_validate(raw)
