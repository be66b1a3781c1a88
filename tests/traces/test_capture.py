"""A run's spans: from a real collector process into the run folder, and on to a user's own.

The run is a stand-in (a run folder, a timeline and a stack that says where its collector
is): the participant under test reads nothing else of it. The collectors are real processes.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx
from tests.traces.conftest import RunningCollector, StartCollector

from faultday.core.otlp import CONTENT_PROTOBUF, encode
from faultday.core.protocols import RunView
from faultday.core.spans import Span
from faultday.core.spanstore import RUN_TRACES_DB, CollectorAddress, SpanStore
from faultday.core.vocab import EventKind
from faultday.observe.trace_capture import TraceCapture


@dataclass
class Stack:
    address: CollectorAddress | None

    def collector(self) -> CollectorAddress | None:
        return self.address


@dataclass
class Run:
    run_dir: Path
    stack: object
    events: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)

    def event(self, kind: str, message: str = "", **data: object) -> None:
        self.events.append((kind, message, data))


def as_run(run: Run) -> RunView:
    """The stand-in as the participant sees it: it reads run_dir, stack and event only."""
    return cast(RunView, run)


def spans(n: int, *, at_ns: int, service: str = "agent") -> list[Span]:
    trace = secrets.token_hex(16)
    one = Span(trace_id=trace, span_id="", parent_id="", service=service, name="op",
               start_ns=at_ns, end_ns=at_ns + 1_000_000)  # fmt: skip
    return [
        dataclasses.replace(one, span_id=secrets.token_hex(8), name=f"op{i}", start_ns=at_ns + i)
        for i in range(n)
    ]


def post(c: RunningCollector, body: bytes) -> int:
    headers = {"Content-Type": CONTENT_PROTOBUF}
    return httpx.post(c.otlp_url, content=body, headers=headers, timeout=5).status_code


def address(c: RunningCollector) -> CollectorAddress:
    return CollectorAddress("collector", c.otlp_url, c.base_url + "/stats", c.db)


def test_the_run_keeps_its_own_spans_and_counts_what_it_lost(
    start_collector: StartCollector, tmp_path: Path
) -> None:
    c = start_collector("--max-spans", "30")
    hour_ago = time.time_ns() - 3600 * 10**9
    assert post(c, encode(spans(5, at_ns=hour_ago), "agent")) == 200  # an earlier run's
    run = Run(tmp_path, Stack(address(c)))
    capture = TraceCapture(max_spans=1000)
    capture.start(as_run(run))
    assert post(c, encode(spans(20, at_ns=time.time_ns()), "agent")) == 200
    assert post(c, encode(spans(20, at_ns=time.time_ns()), "qdrant")) == 200  # 15 past the cap
    assert post(c, b"\x00not protobuf") == 400
    capture.stop()
    capture.stop()  # idempotent

    assert capture.captured is not None
    assert capture.captured.spans == 25 and capture.captured.dropped == 15
    assert capture.captured.rejected == 1
    with SpanStore(tmp_path / RUN_TRACES_DB) as store:
        kept = store.read()
    assert len(kept) == 25 and {s.service for s in kept} == {"agent", "qdrant"}
    ((kind, message, data),) = run.events
    assert kind == EventKind.TRACES_COLLECTED
    assert data["spans"] == 25 and data["dropped"] == 15 and data["rejected"] == 1
    assert "15 dropped" in message


def test_the_runs_spans_go_on_to_the_users_collector(
    start_collector: StartCollector, tmp_path: Path
) -> None:
    ours, theirs = start_collector(), start_collector()
    run = Run(tmp_path, Stack(address(ours)))
    capture = TraceCapture(max_spans=5000, forward=[theirs.otlp_url])
    capture.start(as_run(run))
    now = time.time_ns()
    assert post(ours, encode(spans(1500, at_ns=now), "agent")) == 200  # two bodies onward
    assert post(ours, encode(spans(3, at_ns=now), "proxy")) == 200
    capture.stop()
    assert theirs.stats()["spans_accepted"] == 1503
    (_, _, data) = run.events[0]
    assert data["forwarded"] == {theirs.otlp_url: 1503}


def test_the_run_keeps_at_most_its_max_spans_and_counts_the_rest(
    collector: RunningCollector, tmp_path: Path
) -> None:
    run = Run(tmp_path, Stack(address(collector)))
    capture = TraceCapture(max_spans=10)
    capture.start(as_run(run))
    assert post(collector, encode(spans(25, at_ns=time.time_ns()), "agent")) == 200
    capture.stop()
    assert capture.captured is not None
    assert (capture.captured.spans, capture.captured.dropped) == (10, 15)
    with SpanStore(tmp_path / RUN_TRACES_DB) as store:
        assert [s.name for s in store.read()] == [f"op{i}" for i in range(10)]  # the oldest


def test_no_collector_no_traces(tmp_path: Path) -> None:
    for stack in (Stack(None), object()):  # a profile without one; a driver without any
        run = Run(tmp_path, stack)
        capture = TraceCapture(max_spans=1000)
        capture.start(as_run(run))
        capture.stop()
        assert capture.captured is None and not run.events
    assert not (tmp_path / RUN_TRACES_DB).exists()
