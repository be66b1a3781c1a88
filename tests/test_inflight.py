"""tests/inflight.py: when a fault raced against a stream counts as having met it."""

from __future__ import annotations

import json

import pytest
from tests.inflight import Raced, StreamWatcher, missed, until_in_flight


def _token(finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "text": " a", "finish_reason": finish}]})


def _stream(frames: list[tuple[float, str]], ended_at: float | None) -> StreamWatcher:
    stream = StreamWatcher("http://127.0.0.1:9/v1/completions", {})  # never started
    stream.times = [t for t, _ in frames]
    stream.frames = [f for _, f in frames]
    stream.ended_at = ended_at
    stream.ended = "eof" if ended_at is not None else ""
    return stream


ERROR = json.dumps({"error": {"message": "EngineCore encountered an issue.", "code": 500}})


def test_a_stream_cut_by_a_death_was_in_flight() -> None:
    stream = _stream([(1.0, _token()), (2.5, ERROR), (2.5, "[DONE]")], ended_at=2.6)
    assert missed(stream, fault_at=2.0) is None


def test_a_stream_that_ended_before_the_fault_was_sent_missed_it() -> None:
    stream = _stream([(1.0, _token()), (1.5, _token("length")), (1.5, "[DONE]")], ended_at=1.6)
    why = missed(stream, fault_at=2.0)
    assert why is not None and "before the fault was sent" in why


def test_a_generation_that_finished_after_the_kill_was_sent_still_missed_it() -> None:
    # The last token's frame was on its way when the kill went out: a dead engine makes none.
    stream = _stream([(1.0, _token()), (2.1, _token("length")), (2.1, "[DONE]")], ended_at=2.2)
    why = missed(stream, fault_at=2.0)
    assert why is not None and "finished (length" in why


def test_a_hang_counts_when_the_generation_finished_only_after_it_was_lifted() -> None:
    stream = _stream([(1.0, _token()), (9.0, _token("length")), (9.0, "[DONE]")], ended_at=9.1)
    assert missed(stream, fault_at=2.0, until=4.0) is None
    assert missed(stream, fault_at=2.0, until=9.5) is not None


def test_until_in_flight_takes_the_measurement_again_and_gives_up_after_its_tries() -> None:
    whole = _stream([(1.0, _token()), (1.5, _token("length"))], ended_at=1.6)
    cut = _stream([(1.0, _token()), (2.5, ERROR)], ended_at=2.6)
    tries = iter([whole, cut])
    raced, misses = until_in_flight(lambda i: Raced(next(tries), 2.0, i))
    assert raced.seen == 1 and len(misses) == 1
    with pytest.raises(AssertionError, match="not in flight during the fault in 3 tries"):
        until_in_flight(lambda i: Raced(whole, 2.0, i))
