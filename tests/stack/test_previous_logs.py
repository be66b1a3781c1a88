"""`up` in a run folder an earlier stack used sets that stack's logs aside, by time."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from faultday.stack.stack import KEEP_PREVIOUS, LOG_DIR, PREVIOUS_LOGS, Stack, set_aside_logs

PROFILE = """\
spec:
  proxy: null
  components:
    a: {command: ["{python}", "-c", "import time; print('a runs', flush=True); time.sleep(60)"],
        ready: {kind: none}}
"""


def test_a_second_up_in_the_same_folder_starts_a_fresh_log(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    first = make_stack(PROFILE)
    first.up()
    first.down()
    log = first.log_path("a")
    with log.open("a") as f:
        f.write("ERROR the first stack's own line\n")
    (log.parent / "load.log").write_text("a run's load log\n")

    again = Stack(first.profile, run_dir=first.run_dir, ledger=first.ledger)
    again.up()
    try:
        assert "the first stack's own line" not in log.read_text()
        assert log.read_text().count("faultday starts") == 1
        (kept,) = (log.parent / PREVIOUS_LOGS).iterdir()
        assert re.fullmatch(r"\d{8}T\d{6}Z", kept.name)
        assert sorted(p.name for p in kept.iterdir()) == ["a.log", "load.log"]
        assert "ERROR the first stack's own line" in (kept / "a.log").read_text()
        assert not (log.parent / "load.log").exists()
    finally:
        again.down()


def test_a_fresh_folder_has_nothing_to_set_aside(tmp_path: Path) -> None:
    logs = tmp_path / LOG_DIR
    logs.mkdir()
    assert set_aside_logs(logs) is None
    assert not (logs / PREVIOUS_LOGS).exists()


def test_only_the_newest_sets_are_kept_in_order(tmp_path: Path) -> None:
    logs = tmp_path / LOG_DIR
    logs.mkdir()
    mine = logs / PREVIOUS_LOGS / "notes"  # not a set of logs: never removed
    mine.mkdir(parents=True)
    moved = []
    for i in range(KEEP_PREVIOUS + 7):  # within a second or two: -2, -3 … -10, -11 too
        (logs / "a.log").write_text(f"stack {i}\n")
        dest = set_aside_logs(logs)
        assert dest is not None
        moved.append(dest)
    left = sorted(p for p in (logs / PREVIOUS_LOGS).iterdir() if p != mine)
    assert set(left) == set(moved[-KEEP_PREVIOUS:])
    assert mine.is_dir()
    assert (moved[-1] / "a.log").read_text() == f"stack {KEEP_PREVIOUS + 6}\n"
