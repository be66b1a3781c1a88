"""The audit log of a shared stack (game day, pytest session) lives in the stack's folder."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from faultday.checks.agent import read_audit
from faultday.core.windows import Window, WindowKind


def test_audit_found_in_the_shared_stack_folder(tmp_path: Path) -> None:
    run_dir, stack_dir = tmp_path / "run", tmp_path / "stack-1"
    run_dir.mkdir()
    (stack_dir / "agent").mkdir(parents=True)
    entry = {"ts": 100.5, "decision": "denied", "tool": "update_record"}
    (stack_dir / "agent" / "audit.jsonl").write_text(json.dumps(entry) + "\n")
    clock = SimpleNamespace(t0_wall=100.0)
    window = Window(WindowKind.RUN, "whole run", 0.0, 10.0)
    alone = SimpleNamespace(run_dir=run_dir, clock=clock, time_scale=1.0, stack=None)
    assert read_audit(alone, "agent/audit.jsonl", window) is None  # type: ignore[arg-type]
    shared = SimpleNamespace(
        run_dir=run_dir, clock=clock, time_scale=1.0, stack=SimpleNamespace(run_dir=stack_dir)
    )
    assert read_audit(shared, "agent/audit.jsonl", window) == [entry]  # type: ignore[arg-type]
