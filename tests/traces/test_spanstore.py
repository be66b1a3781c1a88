"""The span store: cap and dropped counter, reads, copy_range, a second process reading."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faultday.core.spans import Span, SpanKind, SpanStatus
from faultday.core.spanstore import SpanStore, SpanStoreError, read_counters

pytestmark = pytest.mark.timeout(60)


def _span(i: int, *, trace: int = 1, start: int | None = None) -> Span:
    return Span(
        trace_id=f"{trace:032x}",
        span_id=f"{i + 1:016x}",
        parent_id="" if i == 0 else f"{1:016x}",
        service="svc",
        name=f"op{i}",
        start_ns=start if start is not None else 1000 + i,
        end_ns=(start if start is not None else 1000 + i) + 5,
        kind=SpanKind.CLIENT,
        status=SpanStatus.ERROR,
        status_message="x",
        attributes={"i": i, "f": 0.5, "b": True, "s": "é"},
    )


def test_the_cap_drops_and_the_counter_persists(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SpanStore(db, max_spans=5) as store:
        assert store.add([_span(i) for i in range(3)]) == 3
        assert store.add([_span(i) for i in range(3, 7)]) == 2
        assert store.add([_span(9)]) == 0
        assert (store.counters().stored, store.counters().dropped) == (5, 3)
    with SpanStore(db, max_spans=5) as again:  # reopened: the counters are in the file
        assert (again.counters().stored, again.counters().dropped) == (5, 3)
        assert again.add([_span(10)]) == 0
    assert read_counters(db).dropped == 4


def test_read_filters_by_time_and_trace(tmp_path: Path) -> None:
    with SpanStore(tmp_path / "s.db") as store:
        store.add([_span(i, trace=1 + i % 2) for i in range(10)])
        assert [s.name for s in store.read(1002, 1005)] == ["op2", "op3", "op4"]
        assert {s.trace_id for s in store.read(trace_ids=[f"{2:032x}"])} == {f"{2:032x}"}
        assert len(store.read(trace_ids=[])) == 0
        assert len(store.read(limit=4)) == 4
        assert store.read()[0] == _span(0)  # every field back as written


def test_copy_range_round_trip(tmp_path: Path) -> None:
    with SpanStore(tmp_path / "s.db") as store:
        spans = [_span(i, start=i * 100) for i in range(20)]
        store.add(spans)
        n = store.copy_range(tmp_path / "run" / "traces.db", 500, 1500)
    assert n == 10
    with SpanStore(tmp_path / "run" / "traces.db") as copy:
        assert copy.read() == spans[5:15]
        assert copy.counters().stored == 10


def test_a_second_process_reads_the_counters_while_a_writer_holds_the_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    with SpanStore(db, max_spans=3) as store:
        store.add([_span(i) for i in range(5)])
        code = (
            "import sys; from pathlib import Path; "
            "from faultday.core.spanstore import read_counters; "
            "c = read_counters(Path(sys.argv[1])); print(c.stored, c.dropped)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(db)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert out.stdout.split() == ["3", "2"]


def test_an_unusable_path_is_a_span_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpanStoreError, match="cannot open"):
        SpanStore(tmp_path / "file" / "s.db")
    with pytest.raises(SpanStoreError, match="cannot open"):
        read_counters(tmp_path / "missing.db")
