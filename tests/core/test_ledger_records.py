"""The ledger's records are a union keyed on ``op``: written in the same JSON shape as
before, read back typed, and a malformed or unknown record is skipped with a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultday.core.ledger import (
    DoneRecord,
    Ledger,
    MarkerRecord,
    ProcessRecord,
    ProcessStarted,
    RevertRecord,
)
from faultday.core.targets import Revert


def _lines(ledger: Ledger) -> list[dict[str, object]]:
    return [json.loads(line) for line in ledger.path.read_text().splitlines()]


def test_records_are_written_in_the_shape_recover_has_always_read(tmp_path: Path) -> None:
    ledger = Ledger.in_dir(tmp_path)
    rev = Revert(injector="latency", fault="f", target="a->b", action="x", data={"k": [1, "2"]})
    ledger.add_spawn("agent")
    ledger.add_revert(rev)
    ledger.revert_done(rev, ok=True)
    ledger.add_process(ProcessRecord("agent", 10, 10, 1.5))
    ledger.process_stopped(10)
    got = _lines(ledger)
    # Key order too: every line starts with its time, then its op.
    assert [list(r)[:2] for r in got] == [["ts", "op"]] * len(got)
    stripped = [{k: v for k, v in r.items() if k != "ts"} for r in got]
    assert stripped == [
        {"op": "marker", "marker": ledger.marker()},
        {"op": "spawn", "component": "agent"},
        {"op": "revert", "revert": rev.to_json()},
        {"op": "done", "id": rev.id, "ok": True, "error": ""},
        {"op": "process", "component": "agent", "pid": 10, "pgid": 10, "create_time": 1.5},
        {"op": "stopped", "pid": 10},
    ]
    typed = ledger.entries()
    assert isinstance(typed[0], MarkerRecord)
    assert isinstance(typed[2], RevertRecord)
    assert isinstance(typed[3], DoneRecord)
    assert isinstance(typed[4], ProcessStarted)
    assert typed[4].pid == 10


def test_malformed_and_unknown_records_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger.in_dir(tmp_path)
    ledger.add_process(ProcessRecord("redis", 20, 20, 2.0))
    with ledger.path.open("a") as f:
        f.write(json.dumps({"ts": 1, "op": "process", "component": "x", "pid": "twelve"}) + "\n")
        f.write(json.dumps({"ts": 1, "op": "teleport", "to": "mars"}) + "\n")
        f.write(json.dumps({"ts": 1, "op": "stopped"}) + "\n")  # no pid: must not stop 20
    ledger.add_process(ProcessRecord("agent", 21, 21, 3.0))
    with caplog.at_level("WARNING"):
        procs = ledger.outstanding_processes()
    assert [p.pid for p in procs] == [21, 20]
    assert caplog.text.count(" record skipped: ") == 3
    assert "malformed process record skipped" in caplog.text
    assert "malformed teleport record skipped" in caplog.text
