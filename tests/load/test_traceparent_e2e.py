"""A real Locust run against a server that records each request's ``traceparent``: every
request carries a well-formed one, trace ids are distinct, the sampled share follows the
setting, and the records the run returns carry the trace ids the server saw."""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.conftest import wait_for

from faultday.core.loadconfig import TracePropagation
from faultday.core.records import RequestRecord
from faultday.core.scenario import Scenario
from faultday.engine.participants import ScenarioLoad, participants_for
from faultday.load.runner import LoadOptions, LocustLoad
from faultday.load.standalone import StandaloneRun

TRACEPARENT = re.compile(r"\A00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])\Z")
pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True, slots=True)
class Seen:
    method: str
    path: str
    traceparent: str | None


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.task_ids = itertools.count(1)
        self.polls: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def _record(self) -> None:
        with self.server.lock:
            self.server.seen.append(Seen(self.command, self.path, self.headers.get("traceparent")))

    def do_GET(self) -> None:
        self._record()
        if self.path.startswith("/v1/tasks/"):
            task_id = self.path.rsplit("/", 1)[1]
            with self.server.lock:
                n = self.server.polls[task_id] = self.server.polls.get(task_id, 0) + 1
            return self._json({"id": task_id, "status": "done" if n >= 2 else "running"})
        return self._json({"ok": True})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._record()
        with self.server.lock:
            task_id = f"t{next(self.server.task_ids)}"
        return self._json({"id": task_id, "status": "queued"})

    def _json(self, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run_load(
    tmp_path: Path, url: str, traces: TracePropagation, *, requests: int, **load: object
) -> list[RequestRecord]:
    """Locust in a subprocess until it has sent ``requests`` (its cap); the records it returned."""
    sc = Scenario.model_validate(
        {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": "traceparent"},
            "spec": {
                "duration": "60s",
                "warmup": "0s",
                "load": {"users": 4, "spawn_rate": 100, "max_requests": requests, **load},
            },
        }
    )
    run = StandaloneRun(sc, tmp_path, {"agent": url})
    locust = LocustLoad(sc.spec.load, LoadOptions(traces=traces))
    locust.start(run)
    try:
        run.clock.start()
        wait_for(lambda: len(run.observations.requests) >= requests, 60.0, f"{requests} records")
        time.sleep(0.3)  # room for a late line, which must not come
    finally:
        locust.stop()
    assert not run.errors
    return list(run.observations.requests)


def parts(seen: list[Seen]) -> list[tuple[str, str, str]]:
    out = []
    for s in seen:
        assert s.traceparent is not None, s
        m = TRACEPARENT.match(s.traceparent)
        assert m is not None, s.traceparent
        trace_id, parent_id, flags = m.groups()
        assert trace_id != "0" * 32 and parent_id != "0" * 16
        out.append((trace_id, parent_id, flags))
    return out


def test_every_request_carries_a_distinct_sampled_trace(tmp_path: Path, recorder: Recorder) -> None:
    n = 200
    records = run_load(tmp_path, recorder.url, TracePropagation(), requests=n, workload="http")
    got = parts(recorder.seen)
    assert len(got) == len(records) == n
    trace_ids = [t for t, _, _ in got]
    assert len(set(trace_ids)) == n  # one trace per request
    assert len({p for _, p, _ in got}) == n
    assert {f for _, _, f in got} == {"01"}  # sample: 1 (the default): every one sampled
    assert sorted(r.trace_id for r in records) == sorted(trace_ids)
    assert all(r.trace_sampled and r.ok for r in records)


def test_the_sampled_share_follows_the_setting(tmp_path: Path, recorder: Recorder) -> None:
    n, share = 600, 0.25
    records = run_load(
        tmp_path, recorder.url, TracePropagation(sample=share), requests=n, workload="http"
    )
    got = parts(recorder.seen)  # the unsampled ones carry a header too, with flag 00
    assert len(got) == len(records) == n and len({t for t, _, _ in got}) == n
    sampled = sum(f == "01" for _, _, f in got)
    # Binomial(600, 0.25): sd ≈ 10.6; five of them either side (fails ~1 run in 1.7 million).
    assert abs(sampled - n * share) <= 5 * math.sqrt(n * share * (1 - share)), sampled
    flags = {t: f == "01" for t, _, f in got}
    assert {r.trace_id: r.trace_sampled for r in records} == flags


def test_an_agent_task_is_one_trace_from_submit_to_last_poll(
    tmp_path: Path, recorder: Recorder
) -> None:
    records = run_load(tmp_path, recorder.url, TracePropagation(), requests=8, workload="agent")
    by_path: dict[str, set[str]] = {}
    for s, (trace_id, _, flags) in zip(recorder.seen, parts(recorder.seen), strict=True):
        assert flags == "01"
        task = s.path.rsplit("/", 1)[1] if s.method == "GET" else "submit"
        by_path.setdefault(task, set()).add(trace_id)
    submits = [r for r in records if r.name == "task.submit"]
    tasks = [r for r in records if r.name == "task"]
    assert submits and tasks
    for r in tasks:
        # Its polls carried the trace its submit started; both records name it.
        assert by_path[r.task_id] == {r.trace_id}, r
        assert any(s.task_id == r.task_id and s.trace_id == r.trace_id for s in submits)
    parents = [p for _, p, _ in parts(recorder.seen)]
    assert len(set(parents)) == len(parents)  # a parent id of its own for each request


def test_traces_disabled_sends_no_header(tmp_path: Path, recorder: Recorder) -> None:
    records = run_load(
        tmp_path, recorder.url, TracePropagation(enabled=False), requests=20, workload="http"
    )
    assert len(recorder.seen) == 20 and all(s.traceparent is None for s in recorder.seen)
    assert all(r.trace_id == "" and not r.trace_sampled for r in records)


def test_the_scenarios_traces_block_reaches_the_load() -> None:
    """participants_for hands the scenario's share and switch to the load it makes."""

    def load_of(traces: dict[str, object]) -> ScenarioLoad:
        sc = Scenario.model_validate(
            {"apiVersion": "faultday/v1", "kind": "Scenario", "metadata": {"name": "t"},
             "spec": {"duration": "5s", "load": {"workload": "http", "users": 1},
                      "traces": traces}}
        )  # fmt: skip
        return next(p for p in participants_for(sc) if isinstance(p, ScenarioLoad))

    assert load_of({"sample": 0.3}).options.traces.sample == 0.3
    assert load_of({"enabled": False}).options.traces.enabled is False
    assert load_of({}).options.traces.sample == 1.0
