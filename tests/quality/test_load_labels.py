"""Locust's labels and quotes on real HTTP: streams cut off, answers too slow, a reservoir."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from tests.load.conftest import free_port

from faultday.core.loadconfig import HttpRequestSpec
from faultday.core.records import ANSWERS_NAME, AnswerLabel
from faultday.core.scenario import Scenario
from faultday.load.runner import LoadOptions, LocustLoad
from faultday.load.standalone import StandaloneRun


def scenario(**load: object) -> Scenario:
    return Scenario.model_validate(
        {
            "apiVersion": "faultday/v1",
            "kind": "Scenario",
            "metadata": {"name": "quality-load"},
            "spec": {"duration": "30s", "warmup": "0s", "load": load},
        }
    )


def run_load(
    tmp_path: Path, url: str, path: str, *, cap: int = 20, **opts: object
) -> StandaloneRun:
    sc = scenario(workload="http", users=2, spawn_rate=100, max_requests=60, answers={"cap": cap})
    http = HttpRequestSpec(target="agent", path=path, stream=True)
    run = StandaloneRun(sc, tmp_path, {"agent": url})
    load = LocustLoad(sc.spec.load, LoadOptions(http=http, **opts))  # type: ignore[arg-type]
    load.start(run)
    try:
        run.clock.start()
        # Locust takes 1-4 s to start on a busy machine: wait for answers, not for a time.
        deadline = time.monotonic() + 25.0
        while len(run.observations.requests) < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        load.stop()
    return run


def test_streams_cut_off_are_truncated_and_whole_ones_ok(tmp_path: Path, ok_server: str) -> None:
    whole = run_load(tmp_path / "whole", ok_server, "/sse", cap=4)
    assert whole.observations.requests
    assert {r.quality for r in whole.observations.requests} == {AnswerLabel.OK}
    cut = run_load(tmp_path / "cut", ok_server, "/sse?cut=1", cap=4)
    rs = cut.observations.requests
    assert rs and {r.quality for r in rs} == {AnswerLabel.TRUNCATED}
    assert not any(r.ok for r in rs) and all(r.error == "answer cut off" for r in rs)
    # Every request up to the cap is quoted, then a reservoir of the cap: 4 in one slot.
    samples = cut.observations.answer_samples()
    assert len(samples) == min(4, len(rs)) and all(s.text == " the answer" for s in samples)
    lines = (tmp_path / "cut" / ANSWERS_NAME).read_text().splitlines()
    assert [json.loads(x)["label"] for x in lines] == ["truncated"] * len(samples)


def test_answers_past_the_client_timeout_are_timeouts(tmp_path: Path, ok_server: str) -> None:
    httpx.get(f"{ok_server}/admin/delay?ms=1500", timeout=2)
    run = run_load(tmp_path, ok_server, "/sse", request_timeout=0.3)
    rs = run.observations.requests
    assert rs and {r.quality for r in rs} == {AnswerLabel.TIMEOUT}, rs[:2]


def test_no_answer_at_all_is_an_error(tmp_path: Path) -> None:
    run = run_load(tmp_path, f"http://127.0.0.1:{free_port()}", "/sse")
    rs = run.observations.requests
    assert rs and {r.quality for r in rs} == {AnswerLabel.ERROR}
