"""A fault raced against a stream: proof that the stream was still in flight when it landed.

A test that kills (or stops) an engine while a long stream runs measures what the
fault did to that stream only if the stream had not already ended. The tiny model
makes its tokens in a few seconds, so on a quiet machine a stream can finish whole
before a kill lands, and the test would report a death that never met the stream.
Every test that races a fault against a stream (tests/real, tests/docker_engine)
uses these: the fault goes in at the stream's first frame, each frame's arrival
time is kept, and :func:`missed` decides from the frames and the fault's time
whether the stream was in flight; :func:`until_in_flight` takes the measurement
again (a bounded number of times) when it was not.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

T = TypeVar("T")

CONNECT_TIMEOUT_S = 10.0
# A miss needs the stream to outrun a kill sent at its first frame: rare, and three in a
# row would mean the setup itself is wrong (a stream too short), which is then reported.
MAX_TRIES = 3


class StreamWatcher:
    """Reads one SSE stream on a thread; records status, frames, their times and the end."""

    def __init__(self, url: str, body: dict[str, Any], *, read_timeout: float = 60.0) -> None:
        self.url = url
        self.body = body
        self.read_timeout = read_timeout
        self.status: int | None = None
        self.frames: list[str] = []  # payloads of `data:` lines, in order
        self.times: list[float] = []  # time.monotonic() each frame arrived
        self.ended: str = ""  # "eof", or the exception's class name
        self.ended_at: float | None = None  # time.monotonic() the stream ended
        self.first_frames = threading.Event()
        self.finished = threading.Event()
        self._wait_frames = 1
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, *, wait_frames: int = 1, timeout: float = 60.0) -> StreamWatcher:
        """Start reading; return once ``wait_frames`` frames arrived (the stream is live)."""
        self._wait_frames = wait_frames
        self._thread.start()
        if not self.first_frames.wait(timeout):
            raise AssertionError(f"stream gave {len(self.frames)} frames in {timeout} s "
                                 f"(status {self.status}, ended {self.ended!r})")  # fmt: skip
        return self

    def _run(self) -> None:
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=self.read_timeout)
        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=timeout) as resp:
                self.status = resp.status_code
                for line in resp.iter_lines():
                    if line.startswith("data:"):
                        self.times.append(time.monotonic())
                        self.frames.append(line[5:].strip())
                        if len(self.frames) >= self._wait_frames:
                            self.first_frames.set()
            self.ended = "eof"
        except httpx.HTTPError as exc:
            self.ended = type(exc).__name__
        finally:
            self.ended_at = time.monotonic()
            self.first_frames.set()
            self.finished.set()

    def join(self, timeout: float) -> bool:
        return self.finished.wait(timeout)

    def error_frames(self) -> list[dict[str, Any]]:
        out = []
        for frame in self.frames:
            obj = _json(frame)
            if obj is not None and "error" in obj:
                out.append(obj["error"])
        return out

    def token_frames(self) -> int:
        return sum(1 for f in self.frames if f != "[DONE]" and '"error"' not in f)

    def finish_at(self) -> tuple[float, str] | None:
        """When the frame that finished the generation arrived, and its ``finish_reason``."""
        for frame, at in zip(list(self.frames), list(self.times), strict=False):
            obj = _json(frame)
            for choice in (obj or {}).get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    return at, str(choice["finish_reason"])
        return None


def _json(frame: str) -> dict[str, Any] | None:
    if frame == "[DONE]":
        return None
    with contextlib.suppress(ValueError):
        obj = json.loads(frame)
        if isinstance(obj, dict):
            return obj
    return None


def missed(stream: StreamWatcher, *, fault_at: float, until: float = math.inf) -> str | None:
    """Why the stream was not in flight while the fault acted, or None when it was.

    ``fault_at`` is when the fault was sent (just before the injector was called),
    ``until`` when it had surely stopped acting (a hang: after the stopped engine's last
    frames drained; a death: never). The stream missed the fault if it had ended by
    ``fault_at``, or if its generation finished (a frame with a ``finish_reason``)
    before ``until``: a dead or stopped engine finishes nothing, so that last token was
    made before the fault landed, whenever its frame arrived.
    """
    if stream.ended_at is not None and stream.ended_at <= fault_at:
        ahead = fault_at - stream.ended_at
        return f"the stream ended ({stream.ended}) {ahead:.3f} s before the fault was sent"
    finish = stream.finish_at()
    if finish is not None and finish[0] < until:
        at, reason = finish
        return (f"the stream's generation finished ({reason}, {stream.token_frames()} token "
                f"frames) {at - fault_at:+.3f} s from the fault's sending")  # fmt: skip
    return None


@dataclass(frozen=True, slots=True)
class Raced(Generic[T]):
    """One try of a fault raced against a stream: the stream, the fault's times, what was seen."""

    stream: StreamWatcher
    fault_at: float
    seen: T
    until: float = math.inf


def until_in_flight(attempt: Callable[[int], Raced[T]], *, tries: int = MAX_TRIES
                    ) -> tuple[Raced[T], list[str]]:  # fmt: skip
    """Run ``attempt(i)`` until its stream was in flight during the fault; at most ``tries``.

    Returns the try that counts and why each earlier one did not. A try whose stream
    missed the fault is taken again, never compared: it measured no race. ``attempt``
    must leave things ready for another try (a fresh server after a death).
    """
    misses: list[str] = []
    for i in range(tries):
        raced = attempt(i)
        why = missed(raced.stream, fault_at=raced.fault_at, until=raced.until)
        if why is None:
            return raced, misses
        misses.append(why)
    raise AssertionError(f"the stream was not in flight during the fault in {tries} tries: "
                         f"{misses}")  # fmt: skip


def stop_mid_stream(
    open_stream: Callable[[], StreamWatcher],
    stop: Callable[[], None],
    resume: Callable[[], None],
    *,
    drain_s: float = 1.0,
    tries: int = MAX_TRIES,
) -> tuple[StreamWatcher, list[str]]:
    """Stop an engine (a hang) at a long stream's first frame, with the stream still in flight.

    ``open_stream`` starts a stream and returns at its first frame; ``stop`` stops the
    engine and returns once it is stopped; ``resume`` undoes that. After ``drain_s``
    (frames already on their way arrive), a stream whose generation had finished
    missed the hang: the engine is resumed, the stream read to its end, and the
    measurement taken again. Returns the stream, with the engine still stopped, and
    why each earlier try did not count.
    """

    def attempt(i: int) -> Raced[None]:
        stream = open_stream()
        fault_at = time.monotonic()
        stop()
        time.sleep(drain_s)
        until = time.monotonic()
        if missed(stream, fault_at=fault_at, until=until) is not None:
            resume()
            stream.join(120)
        return Raced(stream, fault_at, None, until)

    raced, misses = until_in_flight(attempt, tries=tries)
    return raced.stream, misses
