"""Internal values observed during a run (frozen, slotted dataclasses)."""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One client request as the load generator saw it. Times in run seconds (t=0 after warm-up)."""

    t: float  # when it was sent
    duration: float  # end-to-end seconds
    ok: bool
    status: int = 0  # HTTP status; 0 = no response (connection error, timeout)
    name: str = ""  # endpoint or request name
    ttft: float | None = None  # time to first token (streams)
    itl: tuple[float, ...] = ()  # inter-token latencies (streams)
    tokens: int = 0
    degraded: bool = False
    reasons: tuple[str, ...] = ()
    model: str = ""
    error: str = ""
    task_id: str = ""  # agent tasks: the id the runtime gave it
    task_state: str = ""  # agent tasks: the last state seen (done, failed, lost, unfinished)


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one series at one time (scraped metric, derived figure)."""

    t: float
    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Observations:
    """Everything observed in a run, appended by observers, read by checks. Thread-safe appends."""

    requests: list[RequestRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_requests(self, records: Iterable[RequestRecord]) -> None:
        with self._lock:
            for rec in records:
                # Records usually arrive in order; insort keeps windows cheap to slice.
                if self.requests and rec.t < self.requests[-1].t:
                    bisect.insort(self.requests, rec, key=lambda r: r.t)
                else:
                    self.requests.append(rec)

    def add_samples(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            self.samples.extend(samples)

    def requests_between(self, start: float, end: float) -> list[RequestRecord]:
        with self._lock:
            lo = bisect.bisect_left(self.requests, start, key=lambda r: r.t)
            hi = bisect.bisect_left(self.requests, end, key=lambda r: r.t)
            return self.requests[lo:hi]

    def samples_between(
        self, name: str, start: float, end: float, *, labels: dict[str, str] | None = None
    ) -> list[Sample]:
        want = set((labels or {}).items())
        with self._lock:
            return [
                s
                for s in self.samples
                if s.name == name and start <= s.t < end and want <= set(s.labels)
            ]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest observed value with at least p% at or below it.

    Exact (no buckets, no interpolation): the result is always a latency that
    some request really had.
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def metric_values(records: Iterable[RequestRecord], metric: str) -> list[float]:
    """The latency values one metric draws from a set of records (ITL: every gap)."""
    if metric == "e2e":
        return [r.duration for r in records]
    if metric == "ttft":
        return [r.ttft for r in records if r.ttft is not None]
    if metric == "itl":
        return [x for r in records for x in r.itl]
    raise ValueError(f"unknown latency metric {metric!r}")


@dataclass(frozen=True, slots=True)
class Bin:
    start: float
    records: tuple[RequestRecord, ...]


def bins(
    records: Sequence[RequestRecord], *, interval: float, start: float, end: float
) -> list[Bin]:
    """Records grouped into [start + k·interval, …) bins; empty bins included."""
    n = max(0, math.ceil((end - start) / interval - 1e-9))
    groups: list[list[RequestRecord]] = [[] for _ in range(n)]
    for r in records:
        k = math.floor((r.t - start) / interval)
        if 0 <= k < n:
            groups[k].append(r)
    return [Bin(round(start + k * interval, 6), tuple(g)) for k, g in enumerate(groups)]
